"""A fair queue under a real worker: one tenant's backlog does not delay another."""

from __future__ import annotations

import asyncio
import time

from worker_fixtures import Stack, running

from conveyor.context import JobContext

BACKLOG = 5_000
JOB_SECONDS = 0.005


async def test_a_tenants_backlog_does_not_delay_another_tenant(stack: Stack) -> None:
    app = stack.app()
    app.queue("emails", fairness="tenant")

    @app.task("send", queue="emails")
    async def send(ctx: JobContext, n: int) -> None:
        await asyncio.sleep(JOB_SECONDS)

    backlog = [("send", {"n": n}, {"tenant": "A"}) for n in range(BACKLOG)]
    for start in range(0, BACKLOG, 1_000):
        await app.enqueue_many(backlog[start : start + 1_000])
    async with running(app, queues=["emails"], concurrency=10):
        await asyncio.sleep(0.2)  # the worker is busy with A's backlog
        b_jobs = []
        for n in range(10):
            b_jobs.append(await app.enqueue("send", {"n": n}, tenant="B"))
            await asyncio.sleep(0.01)
        deadline = time.monotonic() + 30
        while await app.count_jobs("completed", tenant="B") < len(b_jobs):
            assert time.monotonic() < deadline, "B's jobs did not run"
            await asyncio.sleep(0.02)
        a_left = await app.count_jobs(["waiting", "active"], tenant="A")
    # At most 2,000 of A's jobs can run per second here: B's ten ran while most
    # of A's backlog still waited (a plain queue would run them after it).
    assert a_left > BACKLOG // 2, a_left
    for job in b_jobs:
        done = await app.get_job(job.id)
        assert done is not None
        assert done.started_at is not None
        assert done.started_at - done.created_at < 1.0

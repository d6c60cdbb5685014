"""``workflow_completed`` / ``workflow_failed``: told once by the worker that
finishes a workflow's last job; plain jobs never cost a workflow read."""

from __future__ import annotations

from typing import Any

import pytest
from worker_fixtures import Stack, eventually, running

from conveyor import Conveyor, JobFailed, chain, chord, group
from conveyor.backends.base import JobFilter
from conveyor.context import JobContext


def events_app(stack: Stack) -> tuple[Conveyor, list[tuple[str, dict[str, Any]]]]:
    app = stack.app()
    told: list[tuple[str, dict[str, Any]]] = []

    @app.task("number")
    async def number(ctx: JobContext, n: int) -> int:
        return n

    @app.task("boom", attempts=1)
    async def boom(ctx: JobContext) -> None:
        raise RuntimeError("boom")

    def listen(event: str, **data: Any) -> None:
        told.append((event, data))

    app.on("workflow_completed", listen)
    app.on("workflow_failed", listen)
    return app, told


async def test_a_finished_workflow_is_told_once(stack: Stack) -> None:
    app, told = events_app(stack)
    number = app.tasks["number"]
    members = group(*(number.step(n=n) for n in range(10)))
    done = await app.start(chain(number.step(n=1), chord(members, number.step(n=2))))
    async with running(app, concurrency=4):
        assert await done.wait(timeout=20) == 2
        await eventually(lambda: bool(told), message="workflow_completed")
    assert [event for event, _ in told] == ["workflow_completed"]
    data = told[0][1]
    assert data["workflow_id"] == done.id
    assert data["job"].id == done.jobs[-1].id


async def test_a_failed_step_tells_workflow_failed(stack: Stack) -> None:
    app, told = events_app(stack)
    number, boom = app.tasks["number"], app.tasks["boom"]
    failing = await app.start(chain(number.step(n=1), boom.step(), number.step(n=3)))
    async with running(app):
        with pytest.raises(JobFailed):
            await failing.wait(timeout=20)
        await eventually(lambda: bool(told), message="workflow_failed")
    assert told == [
        (
            "workflow_failed",
            {"workflow_id": failing.id, "state": "failed", "job": told[0][1]["job"]},
        )
    ]
    assert told[0][1]["job"].task == "boom"


async def test_plain_jobs_never_read_a_workflow(stack: Stack) -> None:
    app, told = events_app(stack)
    backend = await app.connect()
    reads: list[JobFilter] = []
    count_jobs = backend.count_jobs

    async def counting(where: JobFilter) -> int:
        if where.workflow_id is not None:
            reads.append(where)
        return await count_jobs(where)

    backend.count_jobs = counting  # type: ignore[method-assign]
    jobs = [await app.enqueue("number", {"n": n}) for n in range(20)]
    async with running(app):
        for job in jobs:
            await app.wait_for_job(job.id, timeout=20)
    assert reads == []
    assert told == []

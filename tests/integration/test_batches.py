"""Batch tasks: a handler takes many jobs at once and returns one outcome per
job; each job keeps its own attempts, retries, timeout, cancellation and outcome."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from worker_fixtures import Stack, eventually, running, settled

from conveyor import BatchContext, Handler, JobState
from conveyor.job import Job


async def test_a_batch_handler_gets_several_jobs_and_stores_each_result(stack: Stack) -> None:
    app = stack.app()
    sizes: list[int] = []

    @app.task("double", batch_size=4)
    async def double(ctx: BatchContext, jobs: list[Job]) -> list[Any]:
        sizes.append(len(jobs))
        assert [job.id for job in ctx.jobs] == [job.id for job in jobs]
        await ctx.progress(100, stage="done")
        return [job.payload["x"] * 2 for job in jobs]

    jobs = await app.enqueue_many([("double", {"x": i}) for i in range(10)])
    assert await app.drain(concurrency=2) == 10
    assert sum(sizes) == 10
    assert max(sizes) == 4  # 10 due jobs, batches of up to 4
    for i, job in enumerate(jobs):
        stored = await settled(job)
        assert stored.state is JobState.COMPLETED
        assert stored.result == i * 2
        assert stored.attempts == 1
        assert stored.progress == {"percent": 100, "stage": "done"}


async def test_a_sync_batch_handler_runs_in_the_thread_pool(stack: Stack) -> None:
    app = stack.app()
    threads: list[str] = []

    @app.task("upper", batch_size=10)
    def upper(ctx: BatchContext, jobs: list[Job]) -> list[str]:
        threads.append(threading.current_thread().name)
        return [job.payload["s"].upper() for job in jobs]

    jobs = await app.enqueue_many([("upper", {"s": s}) for s in "abc"])
    await app.drain()
    assert [(await settled(job)).result for job in jobs] == ["A", "B", "C"]
    assert threads
    assert all(name != threading.main_thread().name for name in threads)


async def test_a_poisoned_job_fails_alone_and_is_retried_alone(stack: Stack) -> None:
    app = stack.app()
    seen: list[list[int]] = []

    @app.task("score", batch_size=5, attempts=3)
    async def score(ctx: BatchContext, jobs: list[Job]) -> list[Any]:
        seen.append([job.payload["x"] for job in jobs])
        return [
            ValueError(f"poisoned {job.payload['x']}") if job.payload["x"] % 5 == 0 else 1
            for job in jobs
        ]

    jobs = await app.enqueue_many([("score", {"x": i}) for i in range(10)])
    async with running(app, concurrency=2):
        stored = [await settled(job) for job in jobs]
    for i, job in enumerate(stored):
        if i % 5 == 0:
            assert job.state is JobState.FAILED
            assert job.attempts == 3
            assert job.error is not None
            assert job.error.message == f"poisoned {i}"
            assert job.error.reason == "error"
        else:
            assert job.state is JobState.COMPLETED
            assert job.attempts == 1
            assert job.result == 1
    # The retries ran without the jobs that had completed.
    retried = [batch for batch in seen if any(x % 5 for x in batch) is False]
    assert sum(len(batch) for batch in retried) == 4  # 2 poisoned jobs x 2 retries


async def test_a_batch_runs_until_the_earliest_deadline_of_its_jobs(stack: Stack) -> None:
    app = stack.app()
    started = asyncio.Event()

    @app.task("slow", batch_size=3, batch_wait="1s", attempts=1)
    async def slow(ctx: BatchContext, jobs: list[Job]) -> list[Any]:
        started.set()
        await asyncio.sleep(10)
        return [None] * len(jobs)

    quick = await app.enqueue("slow", {}, timeout=0.3)
    patient = await app.enqueue_many([("slow", {}, {"timeout": 10}) for _ in range(2)])
    began = time.monotonic()
    async with running(app):
        results = [await settled(job) for job in (quick, *patient)]
    assert time.monotonic() - began < 5
    for job in results:
        assert job.state is JobState.FAILED
        assert job.error is not None
        assert job.error.reason == "timeout"
        assert job.error.type == "JobTimeout"


async def test_cancelling_one_job_of_a_batch_leaves_the_others_their_outcome(
    stack: Stack,
) -> None:
    app = stack.app()
    inside = asyncio.Event()
    saw_cancel: list[set[str]] = []

    @app.task("wait", batch_size=3, batch_wait="1s")
    async def wait(ctx: BatchContext, jobs: list[Job]) -> list[Any]:
        inside.set()
        for _ in range(1000):  # cooperative: look between steps of the work
            if ctx.cancelled_ids:
                break
            await asyncio.sleep(0.01)
        saw_cancel.append(ctx.cancelled_ids)
        assert not ctx.cancelled  # the other jobs are still wanted
        return ["done"] * len(jobs)  # the cancelled job's result is ignored

    jobs = await app.enqueue_many([("wait", {}) for _ in range(3)])
    async with running(app):
        await asyncio.wait_for(inside.wait(), 10)
        await app.cancel(jobs[1].id)
        stored = [await settled(job) for job in jobs]
    assert saw_cancel == [{jobs[1].id}]
    assert [job.state for job in stored] == [
        JobState.COMPLETED,
        JobState.CANCELLED,
        JobState.COMPLETED,
    ]
    assert stored[0].result == "done"


async def test_batch_wait_gathers_jobs_enqueued_a_little_later(stack: Stack) -> None:
    app = stack.app()
    sizes: list[int] = []

    @app.task("gather", batch_size=5, batch_wait="2s")
    async def gather(ctx: BatchContext, jobs: list[Job]) -> list[Any]:
        sizes.append(len(jobs))
        return [None] * len(jobs)

    first = await app.enqueue_many([("gather", {}) for _ in range(2)])
    async with running(app) as worker:
        await eventually(lambda: len(worker.active) == 2, message="the first two jobs held")
        later = await app.enqueue_many([("gather", {}) for _ in range(3)])
        for job in (*first, *later):
            assert (await settled(job)).state is JobState.COMPLETED
    assert sizes == [5]


async def test_a_bad_return_fails_every_job_of_the_batch(stack: Stack) -> None:
    app = stack.app()

    @app.task("short", batch_size=3, attempts=1)
    async def short(ctx: BatchContext, jobs: list[Job]) -> list[Any]:
        return [1]

    @app.task("scalar", batch_size=3, attempts=1)
    async def scalar(ctx: BatchContext, jobs: list[Job]) -> Any:
        return 1

    shorts = await app.enqueue_many([("short", {}) for _ in range(3)])
    scalars = await app.enqueue_many([("scalar", {}) for _ in range(2)])
    await app.drain()
    for job in shorts:
        stored = await settled(job)
        assert stored.state is JobState.FAILED
        assert stored.error is not None
        assert stored.error.reason == "error"
        assert "returned a list of 1 for 3 jobs" in stored.error.message
    for job in scalars:
        stored = await settled(job)
        assert stored.error is not None
        assert "returned int for 2 jobs" in stored.error.message


async def test_invalid_jobs_are_left_out_of_the_batch(stack: Stack) -> None:
    app = stack.app()
    given: list[list[int]] = []

    class Embed(Handler):
        name = "embed"
        batch_size = 10

        def validate(self, payload: Any) -> None:
            if payload["x"] < 0:
                raise ValueError("x must be >= 0")

        async def process_batch(self, ctx: BatchContext, jobs: list[Job]) -> list[Any]:
            given.append([job.payload["x"] for job in jobs])
            return [job.payload["x"] for job in jobs]

    app.register(Embed())
    jobs = await app.enqueue_many([("embed", {"x": x}) for x in (1, -1, 2)])
    await app.drain()
    assert given == [[1, 2]]
    bad = await settled(jobs[1])
    assert bad.state is JobState.FAILED
    assert bad.error is not None
    assert bad.error.reason == "invalid"
    assert [(await settled(jobs[i])).result for i in (0, 2)] == [1, 2]


async def test_a_per_task_cap_counts_the_jobs_of_a_batch(stack: Stack) -> None:
    app = stack.app()
    sizes: list[int] = []

    @app.task("capped", batch_size=10, concurrency=3)
    async def capped(ctx: BatchContext, jobs: list[Job]) -> list[Any]:
        sizes.append(len(jobs))
        await asyncio.sleep(0.05)
        return [None] * len(jobs)

    await app.enqueue_many([("capped", {}) for _ in range(9)])
    assert await app.drain(concurrency=4) == 9
    assert max(sizes) <= 3

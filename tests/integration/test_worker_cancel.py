"""Cancellation: pending jobs at once, running ones cooperatively or by force;
a cancelled job always ends ``cancelled``, never ``failed``."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from worker_fixtures import (
    Recorder,
    Stack,
    released,
    running,
    settled,
)

from conveyor import Backoff, JobCancelled, JobNotFound, JobState
from conveyor.context import JobContext


async def until_cancelled(ctx: JobContext, limit: float = 20) -> bool:
    """What a cooperative handler does: check ``ctx.cancelled`` between steps."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if ctx.cancelled:
            return True
        await asyncio.sleep(0.01)
    return False


async def test_waiting_and_delayed_jobs_are_cancelled_at_once(stack: Stack) -> None:
    app = stack.app()
    recorder = Recorder(app, "cancelled")
    ran: list[str] = []

    @app.task("later")
    async def later(ctx: JobContext) -> None:
        ran.append(ctx.job.id)

    waiting = await later.enqueue()
    delayed = await app.enqueue("later", delay=0.2)
    assert delayed.state is JobState.DELAYED
    for job in (waiting, delayed):
        cancelled = await app.cancel(job.id)
        assert cancelled.state is JobState.CANCELLED
        stored = await app.get_job(job.id)
        assert stored is not None
        assert stored.state is JobState.CANCELLED
        assert stored.finished_at is not None
        with pytest.raises(JobCancelled):
            await job.wait(timeout=1)
    assert [d["job"].id for d in recorder.of("cancelled")] == [waiting.id, delayed.id]
    await asyncio.sleep(0.25)  # the delayed job's time comes and goes
    assert await app.drain() == 0
    assert ran == []


async def test_cancel_of_an_unknown_job_raises(stack: Stack) -> None:
    app = stack.app()
    with pytest.raises(JobNotFound):
        await app.cancel("no-such-job")


async def test_cancel_of_a_finished_job_changes_nothing(stack: Stack) -> None:
    app = stack.app()

    @app.task("quick")
    async def quick(ctx: JobContext) -> int:
        return 1

    job = await quick.enqueue()
    await app.drain()
    after = await app.cancel(job.id)
    assert after.state is JobState.COMPLETED
    assert await job.wait(timeout=1) == 1


async def test_running_job_is_cancelled_cooperatively(stack: Stack) -> None:
    app = stack.app(cancel_grace="10s")
    recorder = Recorder(app, "cancelled", "failed", "dead")
    started = asyncio.Event()
    noticed: list[bool] = []

    @app.task("cooperative", attempts=3)
    async def cooperative(ctx: JobContext) -> str:
        started.set()
        noticed.append(await until_cancelled(ctx))
        return "stopped early"

    job = await cooperative.enqueue()
    async with running(app):
        await asyncio.wait_for(started.wait(), 10)
        signalled = await app.cancel(job.id)
        assert signalled.state is JobState.ACTIVE
        began = time.monotonic()
        with pytest.raises(JobCancelled):
            await job.wait(timeout=5)
        assert time.monotonic() - began < 5  # well before the 10 s grace
    assert noticed == [True]
    stored = await settled(job)
    assert stored.state is JobState.CANCELLED
    assert stored.failure_reason is None
    assert stored.attempts == 1
    assert [d["job"].id for d in recorder.of("cancelled")] == [job.id]
    assert recorder.of("failed") == []
    assert recorder.of("dead") == []


async def test_cancel_requested_through_the_backend_reaches_the_worker(stack: Stack) -> None:
    """A cancel from another process only sets a flag in the backend; the
    worker's lease keeper notices it."""
    app = stack.app(cancel_grace="10s")
    started = asyncio.Event()
    noticed: list[bool] = []

    @app.task("remote.cancel")
    async def remote_cancel(ctx: JobContext) -> None:
        started.set()
        noticed.append(await until_cancelled(ctx))

    job = await remote_cancel.enqueue()
    async with running(app):
        await asyncio.wait_for(started.wait(), 10)
        other = stack.app()  # another app on the same store: no local worker
        flagged = await other.cancel(job.id)
        assert flagged.state is JobState.ACTIVE
        assert flagged.cancel_requested
        with pytest.raises(JobCancelled):
            await job.wait(timeout=5)
    assert noticed == [True]


async def test_handler_ignoring_cancel_is_forced_after_the_grace(stack: Stack) -> None:
    app = stack.app(cancel_grace="0.3s")
    recorder = Recorder(app, "cancelled", "failed", "dead")
    started = asyncio.Event()
    interrupted: list[str] = []

    @app.task("stubborn", attempts=3)
    async def stubborn(ctx: JobContext) -> str:
        started.set()
        try:
            await asyncio.sleep(30)  # never looks at ctx.cancelled
        except asyncio.CancelledError:
            interrupted.append("cancelled")
            raise
        return "finished anyway"

    job = await stubborn.enqueue()
    async with running(app):
        await asyncio.wait_for(started.wait(), 10)
        requested = time.monotonic()
        await app.cancel(job.id)
        with pytest.raises(JobCancelled):
            await job.wait(timeout=10)
        took = time.monotonic() - requested
    assert 0.25 <= took < 5, took
    assert interrupted == ["cancelled"]
    stored = await settled(job)
    assert stored.state is JobState.CANCELLED
    assert stored.failure_reason is None
    assert stored.attempts == 1
    assert [d["job"].id for d in recorder.of("cancelled")] == [job.id]
    assert recorder.of("failed") == []
    assert recorder.of("dead") == []


async def test_handler_raising_after_cancel_ends_cancelled_not_failed(stack: Stack) -> None:
    app = stack.app(cancel_grace="10s")
    started = asyncio.Event()

    @app.task("raises.on.cancel", attempts=3)
    async def raises_on_cancel(ctx: JobContext) -> None:
        started.set()
        await until_cancelled(ctx)
        raise RuntimeError("aborted because cancelled")

    job = await raises_on_cancel.enqueue()
    async with running(app):
        await asyncio.wait_for(started.wait(), 10)
        await app.cancel(job.id)
        with pytest.raises(JobCancelled):
            await job.wait(timeout=5)
    stored = await settled(job)
    assert stored.state is JobState.CANCELLED
    assert stored.attempts == 1


async def test_sync_handler_ignoring_cancel_ends_cancelled(stack: Stack) -> None:
    app = stack.app(cancel_grace="0.3s")
    started = threading.Event()
    gate = threading.Event()

    @app.task("sync.stubborn")
    def sync_stubborn(ctx: JobContext) -> None:
        started.set()
        gate.wait(20)

    job = await sync_stubborn.enqueue()
    with released(gate):
        async with running(app):
            assert await asyncio.to_thread(started.wait, 10)
            await app.cancel(job.id)
            with pytest.raises(JobCancelled):
                await job.wait(timeout=10)
    stored = await settled(job)
    assert stored.state is JobState.CANCELLED


async def test_sync_handler_sees_the_cancel_flag(stack: Stack) -> None:
    app = stack.app(cancel_grace="10s")
    started = threading.Event()
    result: list[Any] = []

    @app.task("sync.cooperative")
    def sync_cooperative(ctx: JobContext) -> str:
        started.set()
        deadline = time.monotonic() + 10
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        result.append(ctx.cancelled)
        return "stopped"

    job = await sync_cooperative.enqueue()
    async with running(app):
        assert await asyncio.to_thread(started.wait, 10)
        await app.cancel(job.id)
        with pytest.raises(JobCancelled):
            await job.wait(timeout=5)
    assert result == [True]


async def test_other_jobs_keep_running_when_one_is_cancelled(stack: Stack) -> None:
    app = stack.app(cancel_grace="0.2s")
    started = asyncio.Event()

    @app.task("victim")
    async def victim(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(30)

    @app.task("bystander")
    async def bystander(ctx: JobContext, n: int) -> int:
        await asyncio.sleep(0.05)
        return n

    doomed = await victim.enqueue()
    async with running(app, concurrency=4):
        await asyncio.wait_for(started.wait(), 10)
        others = [await bystander.enqueue(n=n) for n in range(5)]
        await app.cancel(doomed.id)
        assert [await job.wait(timeout=10) for job in others] == list(range(5))
        with pytest.raises(JobCancelled):
            await doomed.wait(timeout=10)


async def test_cancel_requested_while_the_attempt_fails_is_not_lost(stack: Stack) -> None:
    """A cancel that reaches only the backend (another process asked) while the
    handler is failing: the job must end cancelled, not be retried and run again."""
    app = stack.app(lease="30s", cancel_grace="10s")
    backend = await app.connect()
    started = asyncio.Event()
    proceed = asyncio.Event()
    attempts: list[int] = []

    async def not_yet_polled(job_ids: Any) -> set[str]:
        return set()  # the window before the lease keeper's next poll, made certain

    backend.cancel_requests = not_yet_polled  # type: ignore[method-assign]

    @app.task("fails.after.cancel", attempts=3, backoff=Backoff.fixed(0.05))
    async def fails_after_cancel(ctx: JobContext) -> str:
        attempts.append(ctx.job.attempts)
        if ctx.job.attempts > 1:
            return "ran again"
        started.set()
        await proceed.wait()
        raise RuntimeError("failed before the cancel was noticed")

    job = await fails_after_cancel.enqueue()
    other = stack.app()  # another process's app: the cancel is only a flag in the backend
    async with running(app):
        await asyncio.wait_for(started.wait(), 10)
        flagged = await other.cancel(job.id)
        assert flagged.cancel_requested
        proceed.set()
        final = await settled(job, timeout=10)
    assert final.state is JobState.CANCELLED, (final.state, attempts)
    assert attempts == [1]

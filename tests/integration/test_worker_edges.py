"""Edges of the worker: losing trust in a lease (G4), abandoned sync threads."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from worker_fixtures import (
    Recorder,
    Stack,
    released,
    running,
    settled,
)

from conveyor import BackendUnavailable, FailureReason, JobState
from conveyor.context import JobContext


async def test_worker_that_cannot_renew_cancels_the_handler_before_the_lease_ends(
    stack: Stack,
) -> None:
    """G4: renewals fail, so the worker stops trusting the lease and cancels the
    handler before the lease runs out; it reports no outcome, and the job is
    recovered as stalled and run again."""
    app = stack.app(lease="1s", stall_interval="0.1s")
    recorder = Recorder(app, "stalled", "failed", "completed")
    backend = await app.connect()
    cancelled_at: list[float] = []
    lease_until: list[float] = []

    @app.task("leased")
    async def leased(ctx: JobContext) -> str:
        if ctx.job.attempts == 1:
            assert ctx.job.lease_until is not None
            lease_until.append(ctx.job.lease_until)
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled_at.append(await backend.now())
                raise
        return f"attempt {ctx.job.attempts}"

    original = backend.renew_leases

    async def unreachable(*args: Any, **kwargs: Any) -> Any:
        if not cancelled_at:
            raise BackendUnavailable("renewals cannot get through")
        return await original(*args, **kwargs)

    backend.renew_leases = unreachable  # type: ignore[method-assign]
    job = await leased.enqueue()
    async with running(app):
        assert await job.wait(timeout=15) == "attempt 2"
    assert len(cancelled_at) == 1
    assert cancelled_at[0] < lease_until[0], "the handler ran past its lease"
    done = await settled(job)
    assert done.attempts == 2
    assert done.stalls == 1
    assert [e.type for e in done.errors] == ["Stalled"]
    assert len(recorder.of("stalled")) == 1
    assert recorder.of("failed") == []  # the first run reported nothing


async def test_distrust_comes_before_the_lease_ends_with_a_short_lease(stack: Stack) -> None:
    lease = "0.6s"
    app = stack.app(lease=lease, stall_interval="0.1s")
    backend = await app.connect()
    cancelled_at: list[float] = []
    lease_until: list[float] = []
    started = asyncio.Event()

    @app.task("short.lease")
    async def short_lease(ctx: JobContext) -> None:
        assert ctx.job.lease_until is not None
        lease_until.append(ctx.job.lease_until)
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled_at.append(await backend.now())
            raise

    async def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise BackendUnavailable("renewals cannot get through")

    backend.renew_leases = unreachable  # type: ignore[method-assign]
    job = await short_lease.enqueue()
    async with running(app, maintenance=False):
        await asyncio.wait_for(started.wait(), 10)
        await asyncio.wait_for(gone(app, job.id), 10)
    assert cancelled_at, "the handler was never cancelled"
    assert cancelled_at[0] < lease_until[0], (cancelled_at[0] - lease_until[0], lease)


async def gone(app: Any, job_id: str) -> None:
    """Until no local worker runs ``job_id`` any more."""
    while any(job_id in worker.active for worker in app.runtime.local_workers):  # noqa: ASYNC110  # no event tells when a run ends
        await asyncio.sleep(0.01)


async def test_a_hanging_renewal_still_cancels_the_handler_in_time(stack: Stack) -> None:
    """A renewal that never answers (a network partition) must not keep the
    worker trusting a lease that has run out."""
    app = stack.app(lease="1s", stall_interval="0.1s")
    backend = await app.connect()
    cancelled_at: list[float] = []
    lease_until: list[float] = []
    started = asyncio.Event()

    @app.task("partitioned")
    async def partitioned(ctx: JobContext) -> None:
        assert ctx.job.lease_until is not None
        lease_until.append(ctx.job.lease_until)
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled_at.append(await backend.now())
            raise

    async def hangs(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(3600)

    backend.renew_leases = hangs  # type: ignore[method-assign]
    job = await partitioned.enqueue()
    async with running(app, maintenance=False):
        await asyncio.wait_for(started.wait(), 10)
        await asyncio.wait_for(gone(app, job.id), 10)
    assert cancelled_at, "the handler was never cancelled"
    assert cancelled_at[0] < lease_until[0], cancelled_at[0] - lease_until[0]


async def test_abandoned_sync_thread_does_not_block_later_sync_jobs(stack: Stack) -> None:
    """A timed-out sync handler keeps its thread; the worker's next sync jobs
    must still get a thread and run within their own timeout."""
    app = stack.app()
    gate = threading.Event()

    @app.task("sync.stuck", timeout=0.2, attempts=1)
    def stuck(ctx: JobContext) -> None:
        gate.wait(20)

    @app.task("sync.quick", timeout=1, attempts=1)
    def quick(ctx: JobContext, n: int) -> int:
        return n

    with released(gate):
        async with running(app, concurrency=2):
            hung = [await stuck.enqueue() for _ in range(2)]
            for job in hung:
                failed = await settled(job)
                assert failed.failure_reason is FailureReason.TIMEOUT
            later = [await quick.enqueue(n=n) for n in range(3)]
            outcomes = [await settled(job) for job in later]
    assert [job.state for job in outcomes] == [JobState.COMPLETED] * 3
    assert [job.result for job in outcomes] == [0, 1, 2]


async def test_force_cancelled_sync_thread_does_not_block_later_sync_jobs(stack: Stack) -> None:
    app = stack.app(cancel_grace="0.1s")
    gate = threading.Event()
    started = threading.Event()

    @app.task("sync.ignores.cancel")
    def ignores(ctx: JobContext) -> None:
        started.set()
        gate.wait(20)

    @app.task("sync.after", timeout=1, attempts=1)
    def after(ctx: JobContext) -> str:
        return "ran"

    with released(gate):
        async with running(app, concurrency=1):
            job = await ignores.enqueue()
            assert await asyncio.to_thread(started.wait, 10)
            await app.cancel(job.id)
            assert (await settled(job)).state is JobState.CANCELLED
            follow = await after.enqueue()
            done = await settled(follow)
    assert done.state is JobState.COMPLETED


async def test_claim_errors_are_retried_and_the_worker_goes_on(stack: Stack) -> None:
    app = stack.app()
    backend = await app.connect()
    original = backend.claim_jobs
    failures: list[int] = []

    async def flaky_claim(*args: Any, **kwargs: Any) -> Any:
        if len(failures) < 3:
            failures.append(1)
            raise BackendUnavailable("database restarting")
        return await original(*args, **kwargs)

    backend.claim_jobs = flaky_claim  # type: ignore[method-assign]

    @app.task("patient")
    async def patient(ctx: JobContext) -> str:
        return "ran"

    job = await patient.enqueue()
    async with running(app):
        assert await job.wait(timeout=10) == "ran"
    assert len(failures) == 3


async def test_settle_errors_are_retried_and_the_outcome_is_stored_once(stack: Stack) -> None:
    app = stack.app()
    backend = await app.connect()
    original = backend.settle_jobs
    failures: list[int] = []
    runs: list[int] = []

    async def flaky_settle(*args: Any, **kwargs: Any) -> Any:
        if len(failures) < 2:
            failures.append(1)
            raise BackendUnavailable("connection reset")
        return await original(*args, **kwargs)

    original_with_claim = backend.settle_and_claim

    async def flaky_settle_with_claim(*args: Any, **kwargs: Any) -> Any:
        if len(failures) < 2:
            failures.append(1)
            raise BackendUnavailable("connection reset")
        return await original_with_claim(*args, **kwargs)

    backend.settle_jobs = flaky_settle  # type: ignore[method-assign]
    # A worker waiting for work sends its outcomes with a claim.
    backend.settle_and_claim = flaky_settle_with_claim  # type: ignore[method-assign]

    @app.task("settles.late")
    async def settles_late(ctx: JobContext) -> int:
        runs.append(ctx.job.attempts)
        return 5

    job = await settles_late.enqueue()
    async with running(app):
        assert await job.wait(timeout=10) == 5
    assert len(failures) == 2
    assert runs == [1]


async def test_an_outcome_the_store_refuses_for_longer_than_the_lease_keeps_its_lease(
    stack: Stack,
) -> None:
    """A job that finished while the store cannot take outcomes (a restart, an
    outage) keeps its lease renewed until its outcome is stored: the stall
    reaper, which runs meanwhile, must not recover it and run it again, nor
    spend an attempt on it."""
    app = stack.app(lease="0.6s", stall_interval="0.1s")
    recorder = Recorder(app, "stalled")
    backend = await app.connect()
    refused_until: list[float] = []
    runs: list[int] = []

    def refused_for_four_leases(original: Any) -> Any:
        async def unavailable(*args: Any, **kwargs: Any) -> Any:
            if not refused_until:  # from the first outcome on, for four leases
                refused_until.append(asyncio.get_running_loop().time() + 2.4)
            if asyncio.get_running_loop().time() < refused_until[0]:
                raise BackendUnavailable("settle cannot get through")
            return await original(*args, **kwargs)

        return unavailable

    backend.settle_jobs = refused_for_four_leases(backend.settle_jobs)  # type: ignore[method-assign]
    # A worker waiting for work sends its outcomes with a claim.
    backend.settle_and_claim = refused_for_four_leases(backend.settle_and_claim)  # type: ignore[method-assign]

    @app.task("finished.early")
    async def finished_early(ctx: JobContext) -> int:
        runs.append(ctx.job.attempts)
        return 7

    job = await finished_early.enqueue()
    async with running(app):
        assert await job.wait(timeout=15) == 7
    done = await settled(job)
    assert runs == [1]
    assert (done.attempts, done.stalls, done.errors) == (1, 0, [])
    assert recorder.of("stalled") == []


async def test_a_dead_side_role_stops_the_worker_loudly(stack: Stack) -> None:
    from conveyor.worker.worker import WorkerCrashed

    app = stack.app(heartbeat_interval="0.05s")
    recorder = Recorder(app, "error", "worker_stopped")
    backend = await app.connect()
    original = backend.record_heartbeat
    beats: list[int] = []

    async def broken_heartbeat(*args: Any, **kwargs: Any) -> Any:
        beats.append(1)
        if len(beats) > 2:
            raise RuntimeError("a bug in the heartbeat")
        return await original(*args, **kwargs)

    backend.record_heartbeat = broken_heartbeat  # type: ignore[method-assign]
    worker = app.worker(install_signals=False)
    with pytest.raises(WorkerCrashed) as info:
        await asyncio.wait_for(worker.run(), 10)
    assert isinstance(info.value.__cause__, RuntimeError)
    (error,) = recorder.of("error")
    assert error["where"] == "heartbeat"
    assert len(recorder.of("worker_stopped")) == 1


async def test_progress_reported_before_a_retry_is_kept(stack: Stack) -> None:
    from conveyor import Backoff

    app = stack.app()

    # The backoff outlasts drain(): on a loaded machine a 10 ms one let drain's
    # last claim run the retry too, and the job was never seen delayed.
    @app.task("progress.retry", attempts=2, backoff=Backoff.fixed(0.5))
    async def progress_retry(ctx: JobContext) -> str:
        await ctx.progress(ctx.job.attempts * 40, attempt=ctx.job.attempts)
        if ctx.job.attempts == 1:
            raise RuntimeError("once")
        return "ok"

    job = await progress_retry.enqueue()
    await app.drain()
    retrying = await app.get_job(job.id)
    assert retrying is not None
    assert retrying.state is JobState.DELAYED
    assert retrying.progress == {"percent": 40, "attempt": 1}
    async with running(app):
        assert await job.wait(timeout=10) == "ok"
    done = await settled(job)
    assert done.progress == {"percent": 80, "attempt": 2}


async def test_many_jobs_on_several_workers_each_run_exactly_once(stack: Stack) -> None:
    """G2 without faults: atomic claims, no duplicates, nothing lost."""
    app = stack.app()
    runs: dict[int, list[str]] = {}

    @app.task("counted")
    async def counted(ctx: JobContext, n: int) -> None:
        runs.setdefault(n, []).append(ctx.worker_id)
        await asyncio.sleep(0.005)

    @app.task("sync.counted")
    def sync_counted(ctx: JobContext, n: int) -> None:
        runs.setdefault(n, []).append(ctx.worker_id)

    jobs = await app.enqueue_many(
        [("counted" if n % 2 else "sync.counted", {"n": n}) for n in range(120)]
    )
    async with (
        running(app, worker_id="w-1", concurrency=5),
        running(app, worker_id="w-2", concurrency=5),
        running(app, worker_id="w-3", concurrency=5),
    ):
        for job in jobs:
            assert (await settled(job)).state is JobState.COMPLETED
    assert sorted(runs) == list(range(120))
    assert all(len(workers) == 1 for workers in runs.values())
    assert len({w for workers in runs.values() for w in workers}) > 1  # the work was shared


async def test_a_lost_lease_cancels_the_handler_and_reports_nothing(stack: Stack) -> None:
    """The backend answers that the lease moved on: the handler is cancelled at
    once and its outcome is never written (G4); the job comes back as stalled."""
    from conveyor.backends.base import RenewResult

    app = stack.app(lease="0.6s", stall_interval="0.1s")
    recorder = Recorder(app, "failed", "cancelled", "completed")
    backend = await app.connect()
    original = backend.renew_leases
    interrupted: list[int] = []

    async def says_lost(worker_id: str, leases: Any, lease: float) -> Any:
        if not interrupted:
            return RenewResult(lost={job_id for job_id, _ in leases})
        return await original(worker_id, leases, lease)

    backend.renew_leases = says_lost  # type: ignore[method-assign]

    @app.task("dispossessed")
    async def dispossessed(ctx: JobContext) -> str:
        if ctx.job.attempts == 1:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                interrupted.append(ctx.job.attempts)
                raise
        return f"attempt {ctx.job.attempts}"

    job = await dispossessed.enqueue()
    async with running(app):
        assert await job.wait(timeout=10) == "attempt 2"
    assert interrupted == [1]
    done = await settled(job)
    assert done.stalls == 1
    assert recorder.of("failed") == []
    assert recorder.of("cancelled") == []
    assert len(recorder.of("completed")) == 1

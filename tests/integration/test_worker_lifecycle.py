"""The worker's life: graceful and forced shutdown, lease renewal, heartbeats,
and the stall reaper recovering the jobs of a worker that vanished."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from worker_fixtures import (
    Recorder,
    Stack,
    eventually,
    running,
    settled,
)

from conveyor import Backoff, FailureReason, JobState
from conveyor.backends.base import Backend, ClaimRequest
from conveyor.context import JobContext
from conveyor.job import Job


async def test_stop_lets_a_running_job_finish(stack: Stack) -> None:
    app = stack.app()
    recorder = Recorder(app, "worker_stopped")
    started = asyncio.Event()
    finished: list[str] = []

    @app.task("steady")
    async def steady(ctx: JobContext) -> str:
        started.set()
        await asyncio.sleep(0.3)
        finished.append(ctx.job.id)
        return "finished"

    job = await steady.enqueue()
    queued = await steady.enqueue()
    worker = app.worker(install_signals=False, concurrency=1)
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    worker.stop()
    await asyncio.wait_for(run, 10)
    assert finished == [job.id]
    done = await app.get_job(job.id)
    assert done is not None
    assert done.state is JobState.COMPLETED
    assert done.result == "finished"
    untouched = await app.get_job(queued.id)
    assert untouched is not None
    assert untouched.state is JobState.WAITING  # no claim after stop
    assert untouched.attempts == 0
    assert len(recorder.of("worker_stopped")) == 1
    assert worker.active == {}


async def test_forced_stop_releases_the_job_and_gives_the_attempt_back(stack: Stack) -> None:
    app = stack.app()
    started = asyncio.Event()
    interrupted: list[bool] = []

    @app.task("long", attempts=3)
    async def long_task(ctx: JobContext) -> str:
        started.set()
        if ctx.job.attempts == 1 and not interrupted:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                interrupted.append(True)
                raise
        return f"ran with attempts={ctx.job.attempts}"

    job = await long_task.enqueue()
    worker = app.worker(install_signals=False)
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    active = await app.get_job(job.id)
    assert active is not None
    assert active.state is JobState.ACTIVE
    assert active.attempts == 1
    began = time.monotonic()
    worker.stop(force=True)
    await asyncio.wait_for(run, 10)
    assert time.monotonic() - began < 3
    assert interrupted == [True]
    released = await app.get_job(job.id)
    assert released is not None
    assert released.state is JobState.WAITING
    assert released.attempts == 0
    assert released.lease_until is None
    assert released.worker_id is None
    assert released.errors == []
    # The next worker runs it as a first attempt.
    async with running(app):
        assert await job.wait(timeout=10) == "ran with attempts=1"


async def test_shutdown_timeout_releases_what_is_still_running(stack: Stack) -> None:
    app = stack.app(shutdown_timeout="0.3s")
    started = asyncio.Event()

    @app.task("overrun")
    async def overrun(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(30)

    @app.task("short")
    async def short(ctx: JobContext) -> str:
        await asyncio.sleep(0.05)
        return "made it"

    long_job = await overrun.enqueue()
    worker = app.worker(install_signals=False)
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    short_job = await short.enqueue()
    await eventually(lambda: short_job.id in worker.active, message="short job claimed")
    began = time.monotonic()
    worker.stop()
    await asyncio.wait_for(run, 10)
    took = time.monotonic() - began
    assert 0.25 <= took < 3, took
    assert await short_job.wait(timeout=1) == "made it"
    released = await app.get_job(long_job.id)
    assert released is not None
    assert released.state is JobState.WAITING
    assert released.attempts == 0


async def test_second_stop_with_force_cuts_the_wait_short(stack: Stack) -> None:
    app = stack.app(shutdown_timeout="30s")
    started = asyncio.Event()

    @app.task("very.long")
    async def very_long(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(30)

    job = await very_long.enqueue()
    worker = app.worker(install_signals=False)
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    worker.stop()
    await asyncio.sleep(0.1)
    assert not run.done()  # phase one: waiting for the job
    worker.stop(force=True)
    await asyncio.wait_for(run, 5)
    released = await app.get_job(job.id)
    assert released is not None
    assert released.state is JobState.WAITING
    assert released.attempts == 0


async def test_lease_renewal_keeps_long_jobs_alive(stack: Stack) -> None:
    """An async and a sync job, each running longer than three leases, on two
    workers: renewed, never stalled, never run twice."""
    app = stack.app(lease="0.8s", stall_interval="0.1s")
    recorder = Recorder(app, "stalled")
    runs: list[tuple[str, int]] = []

    @app.task("marathon")
    async def marathon(ctx: JobContext) -> str:
        runs.append(("async", ctx.job.attempts))
        await asyncio.sleep(2.5)  # more than 3 leases
        return "done"

    @app.task("sync.marathon")
    def sync_marathon(ctx: JobContext) -> str:
        runs.append(("sync", ctx.job.attempts))
        time.sleep(2.5)
        return "done"

    jobs = [await marathon.enqueue(), await sync_marathon.enqueue()]
    leases: dict[str, list[float]] = {job.id: [] for job in jobs}
    async with running(app, worker_id="w-1"), running(app, worker_id="w-2"):
        while True:
            current = [await app.get_job(job.id) for job in jobs]
            if all(job is not None and job.is_terminal for job in current):
                break
            for job in current:
                if job is not None and job.lease_until is not None:
                    leases[job.id].append(job.lease_until)
            await asyncio.sleep(0.1)
    for job in current:
        assert job is not None
        assert job.state is JobState.COMPLETED
        assert job.attempts == 1
        assert job.stalls == 0
        assert job.errors == []
        # The lease really moved forward while the job ran.
        assert max(leases[job.id]) - min(leases[job.id]) >= 1.5
    assert sorted(runs) == [("async", 1), ("sync", 1)]
    assert recorder.of("stalled") == []


async def _claim_and_vanish(app_job: Job, backend_app: object, lease: float = 0.2) -> Job:
    """Claim ``app_job`` like a worker that then dies: never renewed, never settled."""
    from conveyor.app import Conveyor

    assert isinstance(backend_app, Conveyor)
    backend = await backend_app.connect()
    result = await backend.claim_jobs(
        ClaimRequest(worker_id="ghost", queues=[app_job.queue], limit=1, lease=lease)
    )
    assert [j.id for j in result.jobs] == [app_job.id]
    return result.jobs[0]


async def test_stall_reaper_recovers_a_job_whose_worker_vanished(stack: Stack) -> None:
    app = stack.app(stall_interval="0.2s")
    recorder = Recorder(app, "stalled")
    runs: list[int] = []

    @app.task("recoverable", attempts=3)
    async def recoverable(ctx: JobContext) -> str:
        runs.append(ctx.job.attempts)
        return "recovered"

    job = await recoverable.enqueue()
    claimed = await _claim_and_vanish(job, app)
    assert claimed.attempts == 1
    assert claimed.worker_id == "ghost"
    began = time.monotonic()
    async with running(app, worker_id="w-rescuer"):
        assert await job.wait(timeout=10) == "recovered"
    # G3: within lease + stall_interval + poll, with room for a slow machine.
    assert time.monotonic() - began < 3
    done = await settled(job)
    assert done.attempts == 2
    assert done.stalls == 1
    assert done.worker_id == "w-rescuer"
    assert runs == [2]
    assert [e.type for e in done.errors] == ["Stalled"]
    assert done.errors[0].reason == FailureReason.STALLED.value
    (event,) = recorder.of("stalled")
    assert event["job"].id == job.id
    assert event["requeued"] is True


async def test_stalled_job_without_attempts_left_fails_stalled(stack: Stack) -> None:
    app = stack.app(stall_interval="0.1s")
    recorder = Recorder(app, "stalled", "dead")

    @app.task("poison", attempts=1)
    async def poison(ctx: JobContext) -> None:
        raise AssertionError("must not run again")

    job = await poison.enqueue()
    await _claim_and_vanish(job, app, lease=0.1)
    async with running(app):
        failed = await settled(job, timeout=10)
        await recorder.wait_for("dead")
    assert failed.state is JobState.FAILED
    assert failed.failure_reason is FailureReason.STALLED
    assert failed.attempts == 1
    (stalled,) = recorder.of("stalled")
    assert stalled["requeued"] is False
    (dead,) = recorder.of("dead")
    assert dead["reason"] == "stalled"
    assert [j.id for j in await app.dlq.list(reason="stalled")] == [job.id]


async def test_max_stalled_bounds_recoveries(stack: Stack) -> None:
    app = stack.app(stall_interval="0.05s", max_stalled=1)

    @app.task("unlucky", attempts=10)
    async def unlucky(ctx: JobContext) -> None:
        raise AssertionError("never reached: claimed by ghosts only")

    job = await unlucky.enqueue()
    await _claim_and_vanish(job, app, lease=0.05)
    reaper_app = stack.app(stall_interval="0.05s", max_stalled=1)
    from conveyor.maintenance.stalls import StallReaper

    backend = await reaper_app.connect()
    reaper = StallReaper(backend, reaper_app.events, max_stalled=1)
    await asyncio.sleep(0.1)
    first = await reaper.run_once()
    assert [j.id for j in first.requeued] == [job.id], (first, await app.get_job(job.id))
    await _claim_and_vanish(job, app, lease=0.05)
    await asyncio.sleep(0.1)
    second = await reaper.run_once()
    assert [j.id for j in second.failed] == [job.id]
    failed = await settled(job)
    assert failed.failure_reason is FailureReason.STALLED
    assert failed.stalls == 2


async def test_outcome_of_a_worker_that_lost_its_lease_is_refused(stack: Stack) -> None:
    """G4: once the reaper gave the job to someone else, the old run's outcome
    must not overwrite the new one."""
    app = stack.app(stall_interval="0.1s")
    ghost = await app.connect()

    @app.task("contested")
    async def contested(ctx: JobContext) -> str:
        return f"attempt {ctx.job.attempts}"

    job = await contested.enqueue()
    stale = await _claim_and_vanish(job, app, lease=0.1)
    async with running(app):
        assert await job.wait(timeout=10) == "attempt 2"
    from conveyor.backends.base import Outcome, Settlement

    result = await ghost.settle_jobs(
        [Settlement(job.id, stale.lease_token or "", Outcome.FAIL, job.task)]
    )
    dbg = await app.get_job(job.id)
    assert result.refused == {job.id}, (dbg, stale)
    done = await settled(job)
    assert done.state is JobState.COMPLETED
    assert done.result == "attempt 2"


async def test_heartbeat_lists_the_worker_while_it_runs(stack: Stack) -> None:
    app = stack.app(heartbeat_interval="0.5s")  # alive while seen within 1.5 s

    @app.task("idle")
    async def idle(ctx: JobContext) -> None: ...

    async with running(app, worker_id="w-beat", concurrency=7, queues=["default", "x"]):
        workers = await app.workers()
        ((info, alive),) = [(w, a) for w, a in workers if w.id == "w-beat"]
        assert alive
        assert info.concurrency == 7
        assert info.queues == ["default", "x", "worker.w-beat"]
        first_seen = info.last_seen

        async def beat_again() -> bool:
            again = [w for w, _ in await app.workers() if w.id == "w-beat"]
            return bool(again) and again[0].last_seen > first_seen

        await eventually(beat_again, message="a second heartbeat")
    assert [w for w, _ in await app.workers() if w.id == "w-beat"] == []


async def test_burst_worker_exits_when_nothing_is_due(stack: Stack) -> None:
    app = stack.app()
    ran: list[int] = []

    @app.task("burst")
    async def burst(ctx: JobContext, n: int) -> None:
        ran.append(n)
        if n < 3:
            await app.enqueue("burst", {"n": n + 1})  # work created during the burst

    await app.enqueue("burst", {"n": 0})
    await app.enqueue("burst", {"n": 10}, delay=60)
    worker = app.worker(install_signals=False, burst=True)
    await asyncio.wait_for(worker.run(), 10)
    assert ran == [0, 1, 2, 3]
    assert worker.processed == 4


async def test_burst_worker_ends_without_waiting_a_poll_interval(stack: Stack) -> None:
    # The last claim comes back short with more jobs than slots; outcomes of
    # those that end after the wake-up claim for the worker (settle_and_claim)
    # and come back empty. Once nothing is held, the burst's next claim ends it
    # at once, not the poll timer (here far longer than the drain).
    app = stack.app(poll_interval="30s")

    @app.task("noop")
    async def noop(ctx: JobContext) -> None:
        return None

    await app.enqueue_many([("noop", None)] * 60)
    began = time.monotonic()
    assert await asyncio.wait_for(app.drain(concurrency=4), 60) == 60
    assert time.monotonic() - began < 10


def slow_down(
    monkeypatch: pytest.MonkeyPatch,
    backend: Backend,
    method: str,
    *,
    send_after: float = 0.0,
    answer_after: float = 0.0,
) -> None:
    """A slow link to a real store: ``method`` is sent late, or answered late."""
    real = getattr(backend, method)

    async def slowed(*args: Any) -> Any:
        await asyncio.sleep(send_after)
        result = await real(*args)
        await asyncio.sleep(answer_after)
        return result

    monkeypatch.setattr(backend, method, slowed)


async def test_burst_worker_claims_again_after_a_job_ends_during_an_empty_claim(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A slow store: the claim's answer is read before the running job enqueues
    # its follow-up, and arrives after that job has ended. The burst is not over.
    app = stack.app()
    slow_down(monkeypatch, await app.connect(), "claim_jobs", answer_after=0.2)
    ran: list[int] = []

    @app.task("chain")
    async def chain(ctx: JobContext, n: int) -> None:
        ran.append(n)
        if n == 0:
            await asyncio.sleep(0.1)  # the poll's empty claim is in flight now
            await app.enqueue("chain", {"n": 1})

    await app.enqueue("chain", {"n": 0})
    worker = app.worker(install_signals=False, burst=True)
    await asyncio.wait_for(worker.run(), 10)
    assert ran == [0, 1]


async def test_burst_worker_runs_a_retry_that_is_due_at_once(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A slow store: the failed attempt's outcome is stored after the next
    # claim came back empty. Its retry is due, so the burst is not over.
    app = stack.app()
    backend = await app.connect()
    slow_down(monkeypatch, backend, "settle_jobs", send_after=0.2)
    # A worker waiting for work sends its outcomes with a claim.
    slow_down(monkeypatch, backend, "settle_and_claim", send_after=0.2)
    attempts: list[int] = []

    @app.task("flaky", attempts=2, backoff=Backoff.fixed(0))
    async def flaky(ctx: JobContext) -> str:
        attempts.append(ctx.job.attempts)
        if ctx.job.attempts == 1:
            raise RuntimeError("first attempt fails")
        return "second attempt"

    job = await flaky.enqueue()
    worker = app.worker(install_signals=False, burst=True)
    await asyncio.wait_for(worker.run(), 10)
    assert attempts == [1, 2]
    done = await app.get_job(job.id)
    assert done is not None
    assert done.state is JobState.COMPLETED

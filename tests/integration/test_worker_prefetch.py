"""Prefetch: jobs claimed ahead of free slots wait in the worker's buffer.

They hold leases (renewed like running ones), a cancel settles them without a
run, a lost lease drops them unstarted, per-task caps count them, and a
stopping worker gives them back at once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from worker_fixtures import Recorder, Stack, eventually, running, settled

from conveyor import JobState
from conveyor.backends.base import ClaimRequest, ClaimResult, RenewResult
from conveyor.context import JobContext
from conveyor.job import Job
from conveyor.worker.worker import Worker


async def stored(job: Job) -> Job:
    app = job._source  # the runtime the job was read from
    assert app is not None
    found = await app.get_job(job.id)
    assert found is not None
    return found


def buffered_ids(worker: Worker) -> set[str]:
    return set(worker.buffered)


async def test_prefetch_defaults_to_half_the_slots_and_zero_turns_it_off(stack: Stack) -> None:
    app = stack.app()
    assert app.worker(concurrency=8).prefetch == 4
    assert app.worker(concurrency=1).prefetch == 0
    assert app.worker(concurrency=8, prefetch=0).prefetch == 0
    assert stack.app(prefetch=3).worker(concurrency=8).prefetch == 3


async def test_buffered_jobs_hold_renewed_leases_and_run_later(stack: Stack) -> None:
    """One slot, one job buffered behind a job that runs for three leases: the
    buffered job's lease is renewed throughout, it is never recovered as
    stalled, and it runs once, as its first attempt."""
    app = stack.app(lease="0.6s", stall_interval="0.1s")
    recorder = Recorder(app, "stalled")
    release = asyncio.Event()
    runs: list[tuple[str, int]] = []

    @app.task("step")
    async def step(ctx: JobContext, name: str) -> str:
        runs.append((name, ctx.job.attempts))
        if name == "first":
            await release.wait()
        return name

    first = await step.enqueue(name="first")
    second = await step.enqueue(name="second")
    async with running(app, concurrency=1, prefetch=1) as worker:
        await eventually(lambda: second.id in worker.buffered, message="second buffered")
        assert list(worker.active) == [first.id]
        leases: list[float] = []
        deadline = time.monotonic() + 2.0  # more than three leases
        while time.monotonic() < deadline:
            held = await stored(second)
            assert held.state is JobState.ACTIVE
            assert held.worker_id == worker.id
            assert held.lease_until is not None
            leases.append(held.lease_until)
            await asyncio.sleep(0.1)
        assert second.id in worker.buffered  # still waiting for the slot
        assert max(leases) - min(leases) >= 1.0, "the buffered job's lease was not renewed"
        info = next(w for w, _ in await app.workers() if w.id == worker.id)
        assert info.active == 1  # the heartbeat counts running jobs, not buffered ones
        release.set()
        assert await second.wait(timeout=10) == "second"
    done = await stored(second)
    assert (done.attempts, done.stalls) == (1, 0)
    assert runs == [("first", 1), ("second", 1)]
    assert recorder.of("stalled") == []


async def test_cancel_of_a_buffered_job_settles_it_without_a_run(stack: Stack) -> None:
    """Cancelled locally (``app.cancel`` in the worker's process) and from
    another process (the lease keeper sees the flag): neither job ever runs."""
    app = stack.app()
    recorder = Recorder(app, "cancelled")
    release = asyncio.Event()
    ran: list[str] = []

    @app.task("gate")
    async def gate(ctx: JobContext, name: str) -> str:
        ran.append(name)
        if name == "blocker":
            await release.wait()
        return name

    blocker = await gate.enqueue(name="blocker")
    local = await gate.enqueue(name="local")
    remote = await gate.enqueue(name="remote")
    after = await gate.enqueue(name="after")
    async with running(app, concurrency=1, prefetch=3) as worker:
        await eventually(
            lambda: buffered_ids(worker) == {local.id, remote.id, after.id},
            message="three jobs buffered",
        )
        assert (await app.cancel(local.id)).state is JobState.ACTIVE
        assert local.id not in worker.buffered
        other = stack.app()  # no local worker: only the backend's flag is set
        assert (await other.cancel(remote.id)).cancel_requested
        await eventually(lambda: remote.id not in worker.buffered, message="remote cancel seen")
        for job in (local, remote):
            done = await settled(job, timeout=5)
            assert done.state is JobState.CANCELLED
            assert done.failure_reason is None
        assert ran == ["blocker"]
        release.set()
        assert await after.wait(timeout=10) == "after"
        assert await blocker.wait(timeout=10) == "blocker"
    assert ran == ["blocker", "after"]
    assert {d["job"].id for d in recorder.of("cancelled")} == {local.id, remote.id}


async def test_a_buffered_job_whose_lease_is_lost_never_starts(stack: Stack) -> None:
    """The backend answers that a buffered job's lease moved on: the worker drops
    it unstarted and reports nothing; the job is recovered as stalled."""
    # A lease a busy host keeps (trusted 1.6 s between renewals): a shorter one
    # lost the blocker's lease for real when the loop stalled.
    app = stack.app(lease="2s", stall_interval="0.1s")
    recorder = Recorder(app, "failed", "cancelled")
    backend = await app.connect()
    original = backend.renew_leases
    release = asyncio.Event()
    ran: list[tuple[str, int]] = []
    targets: set[str] = set()

    async def loses_the_buffered(worker_id: str, leases: Any, lease: float) -> Any:
        # Decided when the renewal is sent: a target added while one is in
        # flight was renewed by it, so that renewal must not report it lost.
        lost = {job_id for job_id, _ in leases if job_id in targets}
        result = await original(worker_id, [held for held in leases if held[0] not in lost], lease)
        targets.difference_update(lost)  # lost once; the stall reaper takes it from there
        return RenewResult(result.renewed, result.lost | lost, result.cancel_requested)

    backend.renew_leases = loses_the_buffered  # type: ignore[method-assign]

    @app.task("hold")
    async def hold(ctx: JobContext, name: str) -> str:
        ran.append((name, ctx.job.attempts))
        if name == "blocker":
            await release.wait()
        return name

    blocker = await hold.enqueue(name="blocker")
    victim = await hold.enqueue(name="victim")
    async with running(app, concurrency=1, prefetch=1) as worker:
        await eventually(lambda: victim.id in worker.buffered, message="victim buffered")
        targets.add(victim.id)
        await eventually(lambda: not targets, message="a renewal that loses the victim")
        release.set()
        assert await blocker.wait(timeout=10) == "blocker"
        assert await victim.wait(timeout=10) == "victim"
    assert ran == [("blocker", 1), ("victim", 2)], "the dropped job must not run on the lost lease"
    done = await stored(victim)
    assert done.stalls == 1
    assert recorder.of("failed") == []
    assert recorder.of("cancelled") == []


async def test_shutdown_releases_the_buffer_at_once(stack: Stack) -> None:
    """A graceful stop waits for the running job, but the buffered jobs go back
    to waiting at once, their attempts given back, for other workers to take."""
    app = stack.app(shutdown_timeout="10s")
    started = asyncio.Event()
    release = asyncio.Event()
    ran: list[tuple[str, int]] = []

    @app.task("slow")
    async def slow(ctx: JobContext, name: str) -> str:
        ran.append((name, ctx.job.attempts))
        if name == "running":
            started.set()
            await release.wait()
        return name

    running_job = await slow.enqueue(name="running")
    waiting = [await slow.enqueue(name=f"b{i}") for i in range(3)]
    worker = app.worker(install_signals=False, concurrency=1, prefetch=3)
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(started.wait(), 10)
        await eventually(lambda: len(worker.buffered) == 3, message="three jobs buffered")
        worker.stop()

        async def all_released() -> bool:
            states = [(await stored(job)).state for job in waiting]
            return states == [JobState.WAITING] * len(waiting)

        await eventually(all_released, timeout=5, message="buffered jobs released")
        assert not run.done()  # still waiting for the running job: nothing stalled on it
        for job in waiting:
            back = await stored(job)
            assert back.attempts == 0
            assert back.worker_id is None
            assert back.lease_until is None
        release.set()
        await asyncio.wait_for(run, 10)
    finally:
        release.set()
        if not run.done():
            worker.stop(force=True)
            await asyncio.wait_for(run, 10)
    assert worker.buffered == {}
    assert (await stored(running_job)).state is JobState.COMPLETED
    assert ran == [("running", 1)]
    # Another worker runs them as first attempts.
    assert await app.drain() == 3
    assert sorted(ran[1:]) == [("b0", 1), ("b1", 1), ("b2", 1)]


async def test_forced_stop_releases_running_and_buffered_jobs(stack: Stack) -> None:
    app = stack.app()
    started = asyncio.Event()

    @app.task("stuck")
    async def stuck(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(30)

    jobs = [await stuck.enqueue() for _ in range(4)]
    worker = app.worker(install_signals=False, concurrency=2, prefetch=2)
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    await eventually(lambda: len(worker.buffered) == 2, message="two jobs buffered")
    began = time.monotonic()
    worker.stop(force=True)
    await asyncio.wait_for(run, 10)
    assert time.monotonic() - began < 3
    for job in jobs:
        back = await stored(job)
        assert (back.state, back.attempts) == (JobState.WAITING, 0)


async def test_per_task_cap_counts_buffered_jobs(stack: Stack) -> None:
    """With room to prefetch, a capped task is still never held (buffered or
    running) beyond its cap; other tasks fill the buffer."""
    app = stack.app()
    backend = await app.connect()
    original = backend.claim_jobs
    held_after_claims: list[int] = []
    buffered_seen: list[int] = []
    running_now = 0
    peak = 0

    def held_capped() -> int:
        runs = [*worker.active.values(), *worker.buffered.values()]
        return sum(run.job.task == "capped" for run in runs)

    async def watched_claim(request: Any) -> Any:
        result = await original(request)
        claimed = sum(job.task == "capped" for job in result.jobs)
        held_after_claims.append(held_capped() + claimed)
        return result

    backend.claim_jobs = watched_claim  # type: ignore[method-assign]

    @app.task("capped", concurrency=2)
    async def capped(ctx: JobContext) -> None:
        nonlocal running_now, peak
        running_now += 1
        peak = max(peak, running_now)
        await asyncio.sleep(0.05)
        running_now -= 1

    @app.task("filler")
    async def filler(ctx: JobContext) -> None:
        buffered_seen.append(len(worker.buffered))
        await asyncio.sleep(0.05)

    jobs = [await capped.enqueue() for _ in range(10)]
    jobs += [await filler.enqueue() for _ in range(30)]
    worker = app.worker(install_signals=False, concurrency=4, prefetch=20)
    run = asyncio.create_task(worker.run())
    try:
        for job in jobs:
            assert (await settled(job)).state is JobState.COMPLETED
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)
    assert worker.processed == len(jobs)
    assert peak == 2
    assert max(held_after_claims) == 2, held_after_claims
    assert max(buffered_seen) > 0, "nothing was buffered: the test proved nothing"


async def test_burst_drains_the_buffer_before_it_exits(stack: Stack) -> None:
    app = stack.app()
    seen_buffered: list[int] = []
    worker: Worker | None = None

    @app.task("tick")
    async def tick(ctx: JobContext) -> None:
        assert worker is not None
        seen_buffered.append(len(worker.buffered))
        await asyncio.sleep(0.02)

    jobs = [await tick.enqueue() for _ in range(12)]
    worker = app.worker(install_signals=False, burst=True, concurrency=2, prefetch=4)
    await asyncio.wait_for(worker.run(), 15)
    assert worker.processed == 12
    assert max(seen_buffered) > 0, "nothing was ever buffered: the test proved nothing"
    assert worker.buffered == {}
    assert worker.active == {}
    for job in jobs:
        assert (await stored(job)).state is JobState.COMPLETED


async def drain_in_burst(worker: Worker, count: int) -> list[int]:
    """Run ``worker`` in burst mode over ``count`` enqueued jobs; its prefetch,
    read at every job's start."""
    seen: list[int] = []
    worker.runtime.events.on("active", lambda event, job, worker_id: seen.append(worker.prefetch))
    await asyncio.wait_for(worker.run(), 60)
    assert worker.processed == count
    return seen


async def test_the_default_buffer_grows_for_short_jobs(stack: Stack) -> None:
    app = stack.app()

    @app.task("quick")
    async def quick(ctx: JobContext) -> None:
        pass

    await app.enqueue_many([("quick", None)] * 400)
    # Every backend's claim as a network round trip (the in-memory one takes
    # microseconds, and so needs no buffer at all).
    backend = await app.connect()
    claim_jobs = backend.claim_jobs

    async def remote_claim(request: ClaimRequest) -> ClaimResult:
        await asyncio.sleep(0.005)
        return await claim_jobs(request)

    backend.claim_jobs = remote_claim  # type: ignore[method-assign]
    worker = app.worker(install_signals=False, burst=True, concurrency=4)
    assert worker.prefetch == 2
    seen = await drain_in_burst(worker, 400)
    # The slots finish jobs much faster than a claim comes back: the buffer
    # grows, up to its ceiling (twice the slots) and never past it.
    assert 2 < max(seen) <= 8


async def test_the_default_buffer_stays_at_half_the_slots_for_long_jobs(stack: Stack) -> None:
    app = stack.app()

    @app.task("slow")
    async def slow(ctx: JobContext) -> None:
        await asyncio.sleep(0.2)

    await app.enqueue_many([("slow", None)] * 12)
    worker = app.worker(install_signals=False, burst=True, concurrency=4)
    seen = await drain_in_burst(worker, 12)
    # The slots finish a job every 50 ms and a claim takes milliseconds: two
    # round trips' worth is well under the base, half the slots.
    assert set(seen) == {2}


async def test_a_prefetch_that_was_set_does_not_adapt(stack: Stack) -> None:
    app = stack.app(prefetch=3)

    @app.task("quick")
    async def quick(ctx: JobContext) -> None:
        pass

    await app.enqueue_many([("quick", None)] * 200)
    seen = await drain_in_burst(app.worker(install_signals=False, burst=True, concurrency=4), 200)
    assert set(seen) == {3}


async def test_a_worker_with_rate_limits_keeps_the_base_buffer(stack: Stack) -> None:
    """Rate limits count jobs at claim: a big buffer would start jobs claimed in
    one window in the next, on top of that window's own."""
    app = stack.app()

    @app.task("quick")
    async def quick(ctx: JobContext) -> None:
        pass

    @app.task("limited", rate_limit="1000/s")
    async def limited(ctx: JobContext) -> None:
        pass

    await app.enqueue_many([("quick", None)] * 200)
    seen = await drain_in_burst(app.worker(install_signals=False, burst=True, concurrency=4), 200)
    assert set(seen) == {2}

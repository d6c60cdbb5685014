"""Every state change a backend carries out is one that ``TRANSITIONS`` allows.

Real jobs are driven through every path on the memory backend (enqueue, claim,
settle with each outcome, stall recovery, cancel, TTL expiry, delayed promotion);
after each operation the whole store is compared with the snapshot before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from conveyor import serialization
from conveyor.backends.base import (
    Backend,
    ClaimRequest,
    JobFilter,
    NewJob,
    Outcome,
    Settlement,
)
from conveyor.backends.memory import MemoryBackend
from conveyor.ids import new_id
from conveyor.job import (
    CREATED_STATES,
    LIVE_STATES,
    TERMINAL_STATES,
    TRANSITIONS,
    ErrorInfo,
    FailureReason,
    Job,
    JobState,
)

Move = tuple[JobState, JobState]


class Observer:
    """Runs backend operations and checks every state change against TRANSITIONS."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.seen: set[Move] = set()
        self.initial: set[JobState] = set()

    async def snapshot(self) -> dict[str, JobState]:
        jobs = await self.backend.list_jobs(JobFilter(), limit=100_000)
        return {job.id: job.state for job in jobs}

    async def step(self, label: str, op: Callable[[], Awaitable[Any]]) -> Any:
        before = await self.snapshot()
        result = await op()
        after = await self.snapshot()
        for job_id, state in after.items():
            if job_id not in before:
                assert state in CREATED_STATES, f"{label}: job created in {state}"
                self.initial.add(state)
                continue
            old = before[job_id]
            if old is not state:
                assert state in TRANSITIONS[old], f"{label}: {old} -> {state} is not allowed"
                self.seen.add((old, state))
        for job_id, old in before.items():
            if job_id not in after:
                assert old in TERMINAL_STATES, f"{label}: a {old} job vanished"
        return result

    # -- operations --------------------------------------------------------
    async def enqueue(self, queue: str = "q", **fields: Any) -> Job:
        new = NewJob(id=new_id(), task="t", queue=queue, payload=serialization.dumps({}), **fields)
        (job,) = await self.step("enqueue", lambda: self.backend.enqueue_jobs([new]))
        return job

    async def claim(self, queue: str = "q", lease: float = 30.0) -> list[Job]:
        request = ClaimRequest(worker_id="w", queues=[queue], limit=100, lease=lease)
        result = await self.step("claim", lambda: self.backend.claim_jobs(request))
        return list(result.jobs)

    async def claim_one(self, job: Job, lease: float = 30.0) -> Job:
        claimed = await self.claim(job.queue, lease)
        assert [j.id for j in claimed] == [job.id]
        return claimed[0]

    async def promote_only(self) -> None:
        """A claim on an empty queue: it promotes and expires but takes nothing."""
        assert await self.claim(queue="nobody-listens-here") == []

    async def settle(self, job: Job, outcome: Outcome, **fields: Any) -> set[str]:
        assert job.lease_token is not None
        item = Settlement(job.id, job.lease_token, outcome, job.task, **fields)
        result = await self.step(f"settle {outcome}", lambda: self.backend.settle_jobs([item]))
        return set(result.refused)

    async def state(self, job: Job) -> Job:
        fresh = await self.backend.get_job(job.id)
        assert fresh is not None
        return fresh


def boom(attempt: int = 1) -> ErrorInfo:
    return ErrorInfo(type="RuntimeError", message="boom", attempt=attempt)


@pytest.fixture
async def observer() -> AsyncIterator[Observer]:
    backend = MemoryBackend("memory://")
    await backend.open()
    try:
        yield Observer(backend)
    finally:
        await backend.close()


def test_the_table_covers_every_state_and_terminal_states_are_final() -> None:
    assert set(TRANSITIONS) == set(JobState)
    for state in TERMINAL_STATES:
        assert TRANSITIONS[state] == frozenset()
    for state in LIVE_STATES:
        assert TRANSITIONS[state], f"{state} has no way out"
        assert state not in TRANSITIONS[state]
    assert set(JobState) == LIVE_STATES | TERMINAL_STATES


async def test_every_path_only_makes_allowed_moves_and_every_allowed_move_happens(
    observer: Observer,
) -> None:
    o = observer

    # waiting -> active -> completed
    job = await o.enqueue()
    running = await o.claim_one(job)
    assert await o.settle(running, Outcome.COMPLETE, result=serialization.dumps(1)) == set()
    assert (await o.state(job)).state is JobState.COMPLETED

    # active -> delayed (retry) -> waiting (promotion) -> active -> failed
    job = await o.enqueue()
    running = await o.claim_one(job)
    await o.settle(running, Outcome.RETRY, error=boom(), retry_delay=0.05)
    assert (await o.state(job)).state is JobState.DELAYED
    await asyncio.sleep(0.08)
    await o.promote_only()
    assert (await o.state(job)).state is JobState.WAITING
    running = await o.claim_one(job)
    await o.settle(running, Outcome.FAIL, error=boom(2), failure_reason=FailureReason.ERROR)
    assert (await o.state(job)).state is JobState.FAILED

    # active -> cancelled (the worker settles a cancel request)
    job = await o.enqueue()
    running = await o.claim_one(job)
    flagged = await o.step("cancel active", lambda: o.backend.cancel_job(job.id))
    assert flagged.state is JobState.ACTIVE
    assert flagged.cancel_requested
    await o.settle(running, Outcome.CANCEL)
    assert (await o.state(job)).state is JobState.CANCELLED

    # active -> waiting (release at shutdown), then a stall, then a stall that fails it
    job = await o.enqueue(max_attempts=5)
    running = await o.claim_one(job)
    await o.settle(running, Outcome.RELEASE)
    released = await o.state(job)
    assert released.state is JobState.WAITING
    assert released.attempts == 0
    await o.claim_one(job, lease=0.05)
    await asyncio.sleep(0.08)
    stall = await o.step("stall", lambda: o.backend.recover_stalled(2))
    assert [j.id for j in stall.requeued] == [job.id]
    assert (await o.state(job)).state is JobState.WAITING
    await o.claim_one(job, lease=0.05)
    await asyncio.sleep(0.08)
    stall = await o.step("stall again", lambda: o.backend.recover_stalled(1))
    assert [j.id for j in stall.failed] == [job.id]
    stalled = await o.state(job)
    assert stalled.state is JobState.FAILED
    assert stalled.failure_reason is FailureReason.STALLED

    # waiting -> cancelled, delayed -> cancelled
    waiting = await o.enqueue()
    delayed = await o.enqueue(delay=60)
    assert delayed.state is JobState.DELAYED
    for pending in (waiting, delayed):
        cancelled = await o.step("cancel", lambda j=pending: o.backend.cancel_job(j.id))
        assert cancelled.state is JobState.CANCELLED

    # waiting -> failed (TTL expiry, inside a claim)
    job = await o.enqueue(ttl=0.05)
    await asyncio.sleep(0.08)
    await o.promote_only()
    expired = await o.state(job)
    assert expired.state is JobState.FAILED
    assert expired.failure_reason is FailureReason.EXPIRED

    # Terminal jobs do not move: cancel is a no-op, a stale settlement is refused.
    done = await o.enqueue()
    running = await o.claim_one(done)
    await o.settle(running, Outcome.COMPLETE)
    await o.step("cancel completed", lambda: o.backend.cancel_job(done.id))
    for outcome in Outcome:
        assert await o.settle(running, outcome) == {done.id}
    assert (await o.state(done)).state is JobState.COMPLETED

    # blocked -> waiting (its dependency completed), blocked -> delayed (it has a
    # delay still ahead), blocked -> cancelled (its dependency failed, or a cancel);
    # created blocked, and created cancelled when a dependency already failed.
    first = await o.enqueue()
    then = await o.enqueue(depends_on=[first.id])
    later = await o.enqueue(depends_on=[first.id], delay=60)
    assert then.state is later.state is JobState.BLOCKED
    running = await o.claim_one(first)
    await o.settle(running, Outcome.COMPLETE)
    assert (await o.state(then)).state is JobState.WAITING
    assert (await o.state(later)).state is JobState.DELAYED
    doomed = await o.enqueue()
    blocked = await o.enqueue(depends_on=[doomed.id])
    cancelled_now = await o.enqueue(depends_on=[blocked.id])
    await o.step("cancel blocked", lambda: o.backend.cancel_job(blocked.id))
    assert (await o.state(cancelled_now)).state is JobState.CANCELLED
    born_cancelled = await o.enqueue(depends_on=[blocked.id])
    assert born_cancelled.state is JobState.CANCELLED

    # Deleting and purging only ever removes terminal jobs.
    await o.step("purge", lambda: o.backend.purge_jobs(JobFilter(states=[JobState.FAILED])))

    allowed = {(old, new) for old, targets in TRANSITIONS.items() for new in targets}
    assert o.seen == allowed, f"never observed: {sorted(allowed - o.seen)}"
    assert o.initial == set(CREATED_STATES)


def _instrument(backend: MemoryBackend, moves: list[tuple[str, JobState, JobState]]) -> None:
    """Wrap every state-changing backend call to record the moves it made.

    The memory store is read directly (no await), so a snapshot is atomic."""
    store = backend._store

    def states() -> dict[str, JobState]:
        with store.lock:
            return {job_id: row.state for job_id, row in store.jobs.items()}

    def wrap(name: str) -> None:
        original = getattr(backend, name)

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            before = states()
            result = await original(*args, **kwargs)
            after = states()
            for job_id, state in after.items():
                old = before.get(job_id)
                if old is None:
                    assert state in CREATED_STATES, f"{name}: job created in {state}"
                elif old is not state:
                    moves.append((name, old, state))
            return result

        setattr(backend, name, wrapper)

    for name in (
        "enqueue_jobs",
        "claim_jobs",
        "settle_jobs",
        "cancel_job",
        "recover_stalled",
        "retry_failed",
        "renew_leases",
        "save_progress",
        "prune_jobs",
    ):
        wrap(name)


def _allowed(operation: str, old: JobState, new: JobState) -> bool:
    if new in TRANSITIONS[old]:
        return True
    # One claim promotes a due delayed job and then takes it: delayed -> waiting -> active.
    return operation == "claim_jobs" and (old, new) == (JobState.DELAYED, JobState.ACTIVE)


async def test_a_worker_run_only_makes_allowed_moves() -> None:
    """The same check through the app and its worker: each backend call the worker
    makes (claim, settle, stall recovery, cancel) is watched."""
    from conveyor import Backoff
    from conveyor.app import Conveyor

    app = Conveyor("memory://", poll_interval="0.02s", lease="0.3s", stall_interval="0.05s")
    calls: dict[str, int] = {}
    started = asyncio.Event()

    @app.task("flaky", attempts=3, backoff=Backoff.fixed(0.02))
    async def flaky(ctx: Any, key: str) -> str:
        calls[key] = calls.get(key, 0) + 1
        if calls[key] < 2:
            raise RuntimeError("first try fails")
        return key

    @app.task("doomed", attempts=2, backoff=Backoff.fixed(0.02))
    async def doomed(ctx: Any) -> None:
        raise RuntimeError("always")

    @app.task("endless")
    async def endless(ctx: Any) -> None:
        started.set()
        while not ctx.cancelled:  # noqa: ASYNC110  # ctx.cancelled is a flag, not an event
            await asyncio.sleep(0.01)

    backend = await app.connect()
    assert isinstance(backend, MemoryBackend)
    moves: list[tuple[str, JobState, JobState]] = []
    _instrument(backend, moves)
    try:
        jobs = [await app.enqueue("flaky", {"key": str(i)}) for i in range(3)]
        jobs.append(await app.enqueue("doomed"))
        late = await app.enqueue("flaky", {"key": "x"}, delay=30)
        await app.cancel(late.id)
        endless_job = await app.enqueue("endless")
        # A job a vanished worker held: its lease runs out, the reaper requeues it.
        orphan = await app.enqueue("flaky", {"key": "orphan"}, queue="orphans")
        await backend.claim_jobs(
            ClaimRequest(worker_id="ghost", queues=["orphans"], limit=1, lease=0.05)
        )
        worker = app.worker(install_signals=False, queues=["default", "orphans"])
        run = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), 5)
        await app.cancel(endless_job.id)
        for job in [*jobs, endless_job, orphan]:
            await app.wait_for_job(job.id, timeout=10)
        worker.stop()
        await asyncio.wait_for(run, 10)
        final = {job.id: (await o_state(app, job.id)) for job in [*jobs, late, endless_job, orphan]}
        assert sorted(final.values()) == sorted(
            [JobState.COMPLETED] * 4 + [JobState.FAILED] + [JobState.CANCELLED] * 2
        )
    finally:
        await app.close()
    bad = [m for m in moves if not _allowed(*m)]
    assert bad == []
    kinds = {(old, new) for _, old, new in moves}
    for expected in [
        (JobState.WAITING, JobState.ACTIVE),
        (JobState.ACTIVE, JobState.COMPLETED),
        (JobState.ACTIVE, JobState.DELAYED),
        (JobState.ACTIVE, JobState.FAILED),
        (JobState.ACTIVE, JobState.CANCELLED),
        (JobState.ACTIVE, JobState.WAITING),
        (JobState.DELAYED, JobState.CANCELLED),
    ]:
        assert expected in kinds, f"the run never made {expected}"


async def o_state(app: Any, job_id: str) -> JobState:
    job = await app.get_job(job_id)
    assert job is not None
    return JobState(job.state)

"""Small builders shared by the conformance tests: jobs, claims, settlements."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from conveyor import serialization
from conveyor.backends.base import (
    Backend,
    CircuitPolicy,
    ClaimRequest,
    ClaimResult,
    NewJob,
    Outcome,
    Settlement,
    SettleResult,
)
from conveyor.ids import new_id
from conveyor.job import ErrorInfo, FailureReason, Job, JobState
from conveyor.ratelimit import RateLimit

#: A lease long enough never to expire during a test that does not want it to.
LONG_LEASE = 30.0
#: Tolerance when comparing two readings of the backend clock taken moments apart.
CLOCK_SLACK = 0.25


def new_job(
    task: str = "t",
    queue: str = "default",
    payload: Any = None,
    *,
    metadata: dict[str, Any] | None = None,
    **options: Any,
) -> NewJob:
    """A :class:`NewJob` with a fresh id; ``options`` are NewJob's other fields."""
    return NewJob(
        id=options.pop("id", None) or new_id(),
        task=task,
        queue=queue,
        payload=serialization.dumps({} if payload is None else payload),
        metadata=None if metadata is None else serialization.dumps(metadata),
        **options,
    )


async def enqueue(backend: Backend, *jobs: NewJob) -> list[Job]:
    return await backend.enqueue_jobs(list(jobs))


async def enqueue_one(
    backend: Backend, task: str = "t", queue: str = "default", **options: Any
) -> Job:
    (job,) = await backend.enqueue_jobs([new_job(task, queue, **options)])
    return job


async def enqueue_sequentially(
    backend: Backend, count: int, task: str = "t", queue: str = "default", **options: Any
) -> list[Job]:
    """``count`` jobs, one call each, a little apart: distinct ``created_at``/``run_at``."""
    jobs = []
    for _ in range(count):
        jobs.append(await enqueue_one(backend, task, queue, **options))
        await asyncio.sleep(0.002)
    return jobs


async def claim(
    backend: Backend,
    queues: Sequence[str] = ("default",),
    limit: int = 100,
    lease: float = LONG_LEASE,
    worker_id: str = "worker-1",
    task_limits: dict[str, int] | None = None,
    rate_limits: dict[str, RateLimit] | None = None,
    circuit_tasks: bool = True,
    key_limits: dict[str, int] | None = None,
    key_rate_limits: dict[str, RateLimit] | None = None,
) -> ClaimResult:
    return await backend.claim_jobs(
        ClaimRequest(
            worker_id=worker_id,
            queues=list(queues),
            limit=limit,
            lease=lease,
            task_limits=task_limits or {},
            rate_limits=rate_limits or {},
            circuit_tasks=circuit_tasks,
            key_limits=key_limits or {},
            key_rate_limits=key_rate_limits or {},
        )
    )


class ClaimedLate(Exception):
    """The machine stalled: a claim or check may have run after the deadline the test needed."""


#: Opens a backend on a new, empty store of the test's kind (fixture ``fresh_backend``).
FreshBackend = Callable[[], Awaitable[Backend]]


async def ran_before(backend: Backend, deadline: float, what: str = "the check") -> None:
    """Prove by the backend clock that what the test just did ran before ``deadline``.

    A check that something has not happened yet (a job not yet due, a key or a
    heartbeat not yet expired) cannot tell a wrong answer from a host that
    paused for a few seconds (CI hosts do). Called right after the check: a
    reading still before ``deadline`` proves the check was in time; otherwise
    :class:`ClaimedLate` is raised, and :func:`again_when_late` reruns the test.
    """
    if await backend.now() >= deadline:
        raise ClaimedLate(f"{what} may have run after {deadline}")


async def claim_before(backend: Backend, deadline: float, **options: Any) -> ClaimResult:
    """:func:`claim` (same options), proven to have run before ``deadline``."""
    result = await claim(backend, **options)
    await ran_before(backend, deadline, "the claim")
    return result


async def claim_one_before(
    backend: Backend, deadline: float, queue: str = "default", **options: Any
) -> Job:
    """:func:`claim_one`, proven to have run before ``deadline``: a late claim
    raises :class:`ClaimedLate`, not the assertion about what it got."""
    result = await claim_before(backend, deadline, queues=[queue], limit=1, **options)
    assert len(result.jobs) == 1, f"expected one claimed job, got {len(result.jobs)}"
    return result.jobs[0]


def again_when_late(
    test: Callable[[Backend], Awaitable[None]],
) -> Callable[[Backend, FreshBackend], Awaitable[None]]:
    """Run a test up to three times while a check of it comes late (:class:`ClaimedLate`).

    Each rerun gets a new, empty store: what a late try left behind (jobs,
    circuits, heartbeats) must not decide the next one.
    """

    async def run(backend: Backend, fresh_backend: FreshBackend) -> None:
        for _ in range(2):
            try:
                await test(backend)
            except ClaimedLate:
                backend = await fresh_backend()
                continue
            return
        await test(backend)  # a third late check fails the test

    # Not functools.wraps: pytest would take the fixtures from the wrapped test's
    # signature (via __wrapped__) and never pass fresh_backend.
    run.__name__ = test.__name__
    run.__qualname__ = test.__qualname__
    run.__doc__ = test.__doc__
    return run


async def claim_one(backend: Backend, queue: str = "default", **kwargs: Any) -> Job:
    result = await claim(backend, [queue], limit=1, **kwargs)
    assert len(result.jobs) == 1, f"expected one claimed job, got {len(result.jobs)}"
    return result.jobs[0]


def error(message: str = "boom", type_: str = "RuntimeError", attempt: int = 1) -> ErrorInfo:
    return ErrorInfo(type=type_, message=message, traceback="Traceback: ...", attempt=attempt)


def settlement(job: Job, outcome: Outcome, **fields: Any) -> Settlement:
    assert job.lease_token is not None, "settle a job as returned by claim_jobs"
    return Settlement(job.id, job.lease_token, outcome, task=job.task, **fields)


async def settle(backend: Backend, job: Job, outcome: Outcome, **fields: Any) -> SettleResult:
    return await backend.settle_jobs([settlement(job, outcome, **fields)])


async def settle_ok(backend: Backend, job: Job, outcome: Outcome, **fields: Any) -> SettleResult:
    result = await settle(backend, job, outcome, **fields)
    assert result.refused == set(), f"settlement of {job.id} was refused"
    return result


async def fetch(backend: Backend, job_id: str) -> Job:
    job = await backend.get_job(job_id)
    assert job is not None, f"job {job_id} is gone"
    return job


async def claim_exact(backend: Backend, job: Job, queue: str | None = None) -> Job:
    """Claim ``job`` itself; other jobs the claim took are released untouched."""
    result = await claim(backend, [queue or job.queue], limit=1000)
    others = [j for j in result.jobs if j.id != job.id]
    if others:
        refused = await backend.settle_jobs([settlement(j, Outcome.RELEASE) for j in others])
        assert refused.refused == set()
    running = [j for j in result.jobs if j.id == job.id]
    assert running, f"job {job.id} was not claimable"
    return running[0]


async def make_failed(
    backend: Backend,
    task: str = "t",
    queue: str = "default",
    reason: FailureReason = FailureReason.ERROR,
    **options: Any,
) -> Job:
    """Enqueue, claim and fail one job; returns it as stored."""
    job = await enqueue_one(backend, task, queue, **options)
    running = await claim_exact(backend, job)
    await settle_ok(backend, running, Outcome.FAIL, error=error(), failure_reason=reason)
    return await fetch(backend, job.id)


async def make_finished(
    backend: Backend,
    state: JobState,
    task: str = "t",
    queue: str = "default",
    **options: Any,
) -> Job:
    """One job brought to a terminal ``state`` through the normal path."""
    if state is JobState.CANCELLED:
        job = await enqueue_one(backend, task, queue, **options)
        cancelled = await backend.cancel_job(job.id)
        assert cancelled is not None
        return cancelled
    if state is JobState.FAILED:
        return await make_failed(backend, task, queue, **options)
    assert state is JobState.COMPLETED
    job = await enqueue_one(backend, task, queue, **options)
    running = await claim_exact(backend, job)
    await settle_ok(backend, running, Outcome.COMPLETE, result=serialization.dumps("ok"))
    return await fetch(backend, job.id)


async def fail_run(
    backend: Backend, task: str, policy: CircuitPolicy, queue: str = "default"
) -> SettleResult:
    """Enqueue, claim and FAIL one job of ``task``, counting it in the circuit."""
    job = await enqueue_one(backend, task, queue)
    running = await claim_exact(backend, job)
    return await settle_ok(
        backend,
        running,
        Outcome.FAIL,
        error=error(),
        failure_reason=FailureReason.ERROR,
        circuit=policy,
    )


def ids(jobs: Sequence[Job]) -> list[str]:
    return [job.id for job in jobs]

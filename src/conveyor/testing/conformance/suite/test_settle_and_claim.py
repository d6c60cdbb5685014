"""settle_and_claim: the outcomes of a batch, then a claim for the worker that
sent them, which sees what the settle did and follows every claim rule."""

from __future__ import annotations

import asyncio
from typing import Any

from conveyor.backends.base import (
    Backend,
    ClaimRequest,
    ClaimResult,
    JobFilter,
    Outcome,
    SettleResult,
)
from conveyor.job import Job, JobState

from .helpers import (
    LONG_LEASE,
    claim,
    claim_one,
    enqueue,
    enqueue_one,
    error,
    fetch,
    new_job,
    settlement,
)


def request(limit: int = 100, queues: tuple[str, ...] = ("default",), **rules: Any) -> ClaimRequest:
    return ClaimRequest(
        worker_id="worker-1",
        queues=queues,
        limit=limit,
        lease=LONG_LEASE,
        **rules,
    )


async def complete_and_claim(
    backend: Backend, job: Job, **rules: Any
) -> tuple[SettleResult, ClaimResult]:
    return await backend.settle_and_claim([settlement(job, Outcome.COMPLETE)], request(**rules))


async def test_the_claim_takes_the_dependent_the_settle_released(backend: Backend) -> None:
    first = await enqueue_one(backend, "a")
    (then,) = await enqueue(backend, new_job("b", depends_on=[first.id]))
    running = await claim_one(backend)
    settled, claimed = await complete_and_claim(backend, running)
    assert not settled.refused
    assert [job.id for job in claimed.jobs] == [then.id]
    (taken,) = claimed.jobs
    assert taken.state is JobState.ACTIVE
    assert taken.attempts == 1
    assert taken.lease_token
    assert taken.worker_id == "worker-1"
    done = await fetch(backend, first.id)
    assert done.state is JobState.COMPLETED
    # The dependent never starts before its dependency finished.
    assert done.finished_at is not None
    assert taken.started_at is not None
    assert taken.started_at >= done.finished_at
    stored = await fetch(backend, then.id)
    assert stored.state is JobState.ACTIVE
    assert stored.lease_token == taken.lease_token


async def test_a_chain_runs_with_one_call_per_step(backend: Backend) -> None:
    first = await enqueue_one(backend, "s")
    jobs = [first]
    for _ in range(4):
        (step,) = await enqueue(backend, new_job("s", depends_on=[jobs[-1].id]))
        jobs.append(step)
    running = await claim_one(backend)
    ran = [running.id]
    while True:
        _, claimed = await complete_and_claim(backend, running)
        if not claimed.jobs:
            break
        (running,) = claimed.jobs
        ran.append(running.id)
    assert ran == [job.id for job in jobs]
    assert await backend.count_jobs(JobFilter(states=[JobState.COMPLETED])) == 5


async def test_refused_outcomes_still_claim(backend: Backend) -> None:
    job = await enqueue_one(backend)
    running = await claim_one(backend)
    await backend.settle_jobs([settlement(running, Outcome.COMPLETE)])
    other = await enqueue_one(backend)
    settled, claimed = await complete_and_claim(backend, running)
    assert settled.refused == {job.id}
    assert [j.id for j in claimed.jobs] == [other.id]


async def test_any_outcome_and_no_outcome(backend: Backend) -> None:
    waiting = await enqueue_one(backend, "w", priority=-1)
    job = await enqueue_one(backend, "r", priority=5)
    running = (await claim(backend, limit=1)).jobs[0]
    assert running.id == job.id
    retry = settlement(running, Outcome.RETRY, error=error(), retry_delay=60.0)
    settled, claimed = await backend.settle_and_claim([retry], request())
    assert not settled.refused
    assert [j.id for j in claimed.jobs] == [waiting.id]
    assert (await fetch(backend, job.id)).state is JobState.DELAYED
    _, claimed = await backend.settle_and_claim([], request())
    assert claimed.jobs == []


async def test_the_claim_keeps_the_claim_rules(backend: Backend) -> None:
    """Paused queues, task caps and the limit hold for the claim part as for
    claim_jobs, and the key slot the settle gave back is free to it."""
    await backend.set_queue_paused("paused", True)
    await enqueue_one(backend, "p", "paused")
    holder = await enqueue_one(backend, "keyed", concurrency_key="k", priority=9)
    running = (await claim(backend, limit=1, key_limits={"keyed": 1})).jobs[0]
    assert running.id == holder.id
    behind = await enqueue_one(backend, "keyed", concurrency_key="k", priority=5)
    capped = [await enqueue_one(backend, "capped") for _ in range(3)]
    settled, claimed = await complete_and_claim(
        backend,
        running,
        queues=("default", "paused"),
        limit=3,
        key_limits={"keyed": 1},
        task_limits={"capped": 1},
    )
    assert not settled.refused
    got = [j.id for j in claimed.jobs]
    assert got[0] == behind.id  # the slot its completion gave back
    assert len(got) == 2
    assert got[1] in {j.id for j in capped}
    assert await backend.count_jobs(JobFilter(states=[JobState.WAITING], queue="paused")) == 1


async def test_the_claim_expires_jobs_past_their_ttl(backend: Backend) -> None:
    stale = await enqueue_one(backend, "stale", ttl=0.05)
    job = await enqueue_one(backend, "x", priority=5)
    running = (await claim(backend, limit=1)).jobs[0]
    assert running.id == job.id
    await asyncio.sleep(0.3)  # past the TTL
    _, claimed = await complete_and_claim(backend, running)
    assert claimed.jobs == []
    assert [j.id for j in claimed.expired] == [stale.id]

"""RELEASE with a ``retry_delay``: the job is given back for later.

A worker that does not know a job's task releases it with a delay (the
``unknown_task_grace`` of the worker): the job is ``delayed`` until now +
delay, its attempt given back, its TTL counted from its new run_at. A release
without a delay is unchanged (``waiting``, in its old place), and a pending
cancel still wins.
"""

from __future__ import annotations

import asyncio

from conveyor import serialization
from conveyor.backends.base import Backend, Outcome
from conveyor.job import JobState

from .helpers import (
    again_when_late,
    claim,
    claim_before,
    claim_one,
    enqueue,
    enqueue_one,
    error,
    fetch,
    ids,
    new_job,
    ran_before,
    settle_ok,
    settlement,
)


async def test_a_release_with_a_delay_is_delayed_with_its_attempt_given_back(
    backend: Backend,
) -> None:
    (job,) = await enqueue(backend, new_job(max_attempts=1))
    running = await claim_one(backend)
    assert running.attempts == 1
    before = await backend.now()
    result = await settle_ok(backend, running, Outcome.RELEASE, retry_delay=30)
    after = await backend.now()
    assert result.cancelled == set()

    stored = await fetch(backend, job.id)
    assert stored.state is JobState.DELAYED
    assert stored.attempts == 0
    assert before + 30 <= stored.run_at <= after + 30
    assert stored.worker_id is None
    assert stored.lease_token is None
    assert stored.lease_until is None
    assert stored.finished_at is None
    assert stored.failure_reason is None
    assert stored.errors == []
    assert stored.expires_at is None  # no TTL: none after the delay either
    assert (await claim(backend)).jobs == []


@again_when_late
async def test_a_delayed_release_runs_after_its_delay_without_spending_attempts(
    backend: Backend,
) -> None:
    (job,) = await enqueue(backend, new_job(max_attempts=1))
    for _ in range(3):  # more releases than the job has attempts
        running = await claim_one(backend)
        assert running.id == job.id
        assert running.attempts == 1
        settled = await backend.now()
        await settle_ok(backend, running, Outcome.RELEASE, retry_delay=0.2)
        not_yet = await claim(backend)
        await ran_before(backend, settled + 0.2, "the claim")  # before it was due
        assert not_yet.jobs == []
        await asyncio.sleep(0.27)
    last = await claim_one(backend)
    assert last.attempts == 1
    await settle_ok(backend, last, Outcome.COMPLETE, result=serialization.dumps("ran"))
    done = await fetch(backend, job.id)
    assert done.state is JobState.COMPLETED
    assert done.attempts == 1


async def test_a_delayed_release_keeps_the_error_it_was_given(backend: Backend) -> None:
    await enqueue_one(backend)
    running = await claim_one(backend)
    await settle_ok(
        backend, running, Outcome.RELEASE, retry_delay=60, error=error("not known here")
    )
    stored = await fetch(backend, running.id)
    assert stored.state is JobState.DELAYED
    assert [e.message for e in stored.errors] == ["not known here"]


async def test_a_delayed_release_counts_its_ttl_from_its_new_run_at(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job(ttl=60))
    running = await claim_one(backend)
    await settle_ok(backend, running, Outcome.RELEASE, retry_delay=30)
    stored = await fetch(backend, job.id)
    assert stored.state is JobState.DELAYED
    assert stored.ttl == 60
    assert stored.expires_at == stored.run_at + 60


@again_when_late
async def test_a_delayed_release_does_not_expire_while_it_is_delayed(backend: Backend) -> None:
    """Its first deadline passes while it waits out the delay: only the TTL of
    the wait that starts at its new run_at counts."""
    (job,) = await enqueue(backend, new_job(ttl=0.3))
    running = await claim_one(backend)
    await settle_ok(backend, running, Outcome.RELEASE, retry_delay=0.4)
    stored = await fetch(backend, job.id)
    assert stored.expires_at is not None
    await asyncio.sleep(0.47)  # past the first deadline and the delay, not the new deadline
    result = await claim_before(backend, stored.expires_at)
    assert result.expired == []
    assert ids(result.jobs) == [job.id]
    assert result.jobs[0].attempts == 1


async def test_a_pending_cancel_wins_over_a_delayed_release(backend: Backend) -> None:
    await enqueue_one(backend)
    running = await claim_one(backend)
    await backend.cancel_job(running.id)
    before = await backend.now()
    result = await settle_ok(backend, running, Outcome.RELEASE, retry_delay=30)
    stored = await fetch(backend, running.id)
    assert result.cancelled == {running.id}
    assert stored.state is JobState.CANCELLED
    assert stored.finished_at is not None
    assert stored.finished_at >= before
    assert stored.lease_token is None
    assert (await claim(backend)).jobs == []
    assert await backend.cancel_requests([running.id]) == set()


async def test_one_batch_releases_now_and_for_later(backend: Backend) -> None:
    now = await backend.now()
    (a, b, c, d) = await enqueue(
        backend, *(new_job(run_at=now - 10 + i) for i in range(3)), new_job()
    )
    ra, rb, rc, rd = (await claim(backend, limit=4)).jobs
    assert ids([ra, rb, rc, rd]) == ids([a, b, c, d])
    await backend.cancel_job(rd.id)
    result = await backend.settle_jobs(
        [
            settlement(ra, Outcome.RELEASE),
            settlement(rb, Outcome.RELEASE, retry_delay=60),
            settlement(rc, Outcome.COMPLETE, result=serialization.dumps(1)),
            settlement(rd, Outcome.RELEASE, retry_delay=60),
        ]
    )
    assert result.refused == set()
    assert result.cancelled == {d.id}
    stored = {j.id: j for j in await backend.get_jobs(ids([a, b, c, d]))}
    assert stored[a.id].state is JobState.WAITING
    assert stored[a.id].run_at == a.run_at  # a release without a delay keeps its place
    assert stored[a.id].attempts == 0
    assert stored[b.id].state is JobState.DELAYED
    assert stored[b.id].run_at >= now + 60
    assert stored[b.id].attempts == 0
    assert stored[c.id].state is JobState.COMPLETED
    assert stored[d.id].state is JobState.CANCELLED
    assert ids((await claim(backend)).jobs) == [a.id]


async def test_a_delayed_release_leaves_its_dependents_blocked(backend: Backend) -> None:
    (first,) = await enqueue(backend, new_job())
    (dependent,) = await enqueue(backend, new_job(depends_on=[first.id]))
    assert dependent.state is JobState.BLOCKED
    running = await claim_one(backend)
    assert running.id == first.id
    await settle_ok(backend, running, Outcome.RELEASE, retry_delay=30)
    assert (await fetch(backend, first.id)).state is JobState.DELAYED
    assert (await fetch(backend, dependent.id)).state is JobState.BLOCKED

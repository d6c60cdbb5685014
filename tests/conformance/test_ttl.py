"""TTL: a job still waiting past its TTL fails as expired inside the claim (G8)."""

from __future__ import annotations

import asyncio

from conveyor.backends.base import Backend
from conveyor.job import FailureReason, JobState

from .helpers import claim, claim_one, enqueue, enqueue_one, fetch, ids, new_job

TTL = 0.2
PAST_TTL = 0.27


async def test_job_ttl_sets_expires_at(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job(ttl=5))
    assert job.expires_at is not None
    assert abs(job.expires_at - (job.run_at + 5)) < 1e-3


async def test_expired_job_fails_inside_the_claim_and_is_never_claimed(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job(ttl=TTL))
    await asyncio.sleep(PAST_TTL)
    before = await backend.now()
    result = await claim(backend)
    assert result.jobs == []
    assert ids(result.expired) == [job.id]
    (expired,) = result.expired
    assert expired.state is JobState.FAILED
    assert expired.failure_reason is FailureReason.EXPIRED
    assert expired.error is not None
    assert expired.error.type == "Expired"
    assert expired.error.message == "queue TTL expired"

    stored = await fetch(backend, job.id)
    assert stored.state is JobState.FAILED
    assert stored.failure_reason is FailureReason.EXPIRED
    assert stored.finished_at is not None
    assert stored.finished_at >= before
    assert stored.attempts == 0
    assert stored.started_at is None
    assert (await claim(backend)).expired == []  # reported once


async def test_queue_ttl(backend: Backend) -> None:
    await backend.configure_queue("short-lived", max_size=None, ttl=TTL)
    (job,) = await enqueue(backend, new_job(queue="short-lived"))
    assert job.expires_at is not None
    assert abs(job.expires_at - (job.run_at + TTL)) < 1e-3
    await asyncio.sleep(PAST_TTL)
    result = await claim(backend, ["short-lived"])
    assert result.jobs == []
    assert ids(result.expired) == [job.id]


async def test_the_smaller_of_job_and_queue_ttl_wins(backend: Backend) -> None:
    await backend.configure_queue("q", max_size=None, ttl=10)
    job_shorter, queue_shorter = await enqueue(
        backend, new_job(queue="q", ttl=2), new_job(queue="q", ttl=50)
    )
    assert job_shorter.expires_at is not None
    assert queue_shorter.expires_at is not None
    assert abs(job_shorter.expires_at - (job_shorter.run_at + 2)) < 1e-3
    assert abs(queue_shorter.expires_at - (queue_shorter.run_at + 10)) < 1e-3


async def test_ttl_counts_from_run_at(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job(delay=0.2, ttl=0.3))
    assert job.expires_at is not None
    assert abs(job.expires_at - (job.run_at + 0.3)) < 1e-3
    # Past the TTL counted from enqueue (0.3), not from run_at (0.5): still claimable.
    await asyncio.sleep(0.37)
    result = await claim(backend)
    assert ids(result.jobs) == [job.id]
    assert result.expired == []


async def test_expired_from_a_queue_nobody_asked_for(backend: Backend) -> None:
    """A job sent to a worker that is gone fails instead of waiting forever."""
    (orphan,) = await enqueue(backend, new_job(queue="worker.gone-123", ttl=TTL))
    (normal,) = await enqueue(backend, new_job())
    await asyncio.sleep(PAST_TTL)
    result = await claim(backend, ["default"])
    assert ids(result.jobs) == [normal.id]
    assert ids(result.expired) == [orphan.id]
    assert result.expired[0].queue == "worker.gone-123"
    assert (await fetch(backend, orphan.id)).state is JobState.FAILED


async def test_expiry_happens_even_when_nothing_can_be_claimed(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job(queue="paused", ttl=TTL))
    await backend.set_queue_paused("paused", True)
    await asyncio.sleep(PAST_TTL)
    result = await claim(backend, ["paused"], limit=0)
    assert ids(result.expired) == [job.id]


async def test_unexpired_jobs_are_left_alone(backend: Backend) -> None:
    (short, long_) = await enqueue(backend, new_job(queue="x", ttl=TTL), new_job(queue="x", ttl=30))
    await asyncio.sleep(PAST_TTL)
    result = await claim(backend, ["default"])
    assert ids(result.expired) == [short.id]
    assert (await fetch(backend, long_.id)).state is JobState.WAITING


async def test_an_active_job_does_not_expire(backend: Backend) -> None:
    await enqueue_one(backend, ttl=TTL)
    running = await claim_one(backend)
    await asyncio.sleep(PAST_TTL)
    result = await claim(backend)
    assert result.expired == []
    assert (await fetch(backend, running.id)).state is JobState.ACTIVE


async def test_no_ttl_means_no_expiry(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job())
    await backend.configure_queue("other", max_size=None, ttl=TTL)
    await asyncio.sleep(PAST_TTL)
    result = await claim(backend)
    assert result.expired == []
    assert ids(result.jobs) == [job.id]

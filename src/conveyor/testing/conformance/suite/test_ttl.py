"""TTL: a job still waiting past its TTL fails as expired inside the claim (G8).

The job stores its effective TTL, and each wait gets it afresh: enqueue, retry,
release, stall recovery and dead-letter retry all re-set ``expires_at``.
"""

from __future__ import annotations

import asyncio

from conveyor.backends.base import Backend, Outcome, QueueInfo
from conveyor.ids import new_id
from conveyor.job import FailureReason, Job, JobState

from .helpers import (
    again_when_late,
    claim,
    claim_before,
    claim_exact,
    claim_one,
    claim_one_before,
    enqueue,
    enqueue_one,
    error,
    fetch,
    ids,
    make_failed,
    new_job,
    settle_ok,
)

TTL = 0.2
PAST_TTL = 0.27


def expiry(job: Job) -> float:
    assert job.expires_at is not None, f"job {job.id} has no TTL deadline"
    return job.expires_at


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
    await backend.configure_queue(QueueInfo("short-lived", max_size=None, ttl=TTL))
    (job,) = await enqueue(backend, new_job(queue="short-lived"))
    assert job.expires_at is not None
    assert abs(job.expires_at - (job.run_at + TTL)) < 1e-3
    await asyncio.sleep(PAST_TTL)
    result = await claim(backend, ["short-lived"])
    assert result.jobs == []
    assert ids(result.expired) == [job.id]


async def test_the_smaller_of_job_and_queue_ttl_wins(backend: Backend) -> None:
    await backend.configure_queue(QueueInfo("q", max_size=None, ttl=10))
    job_shorter, queue_shorter = await enqueue(
        backend, new_job(queue="q", ttl=2), new_job(queue="q", ttl=50)
    )
    assert job_shorter.expires_at is not None
    assert queue_shorter.expires_at is not None
    assert abs(job_shorter.expires_at - (job_shorter.run_at + 2)) < 1e-3
    assert abs(queue_shorter.expires_at - (queue_shorter.run_at + 10)) < 1e-3


@again_when_late
async def test_ttl_counts_from_run_at(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job(delay=0.2, ttl=0.3))
    assert job.expires_at is not None
    assert abs(job.expires_at - (job.run_at + 0.3)) < 1e-3
    # Past the TTL counted from enqueue (0.3), not from run_at (0.5): still claimable.
    await asyncio.sleep(0.37)
    result = await claim_before(backend, job.expires_at)
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


@again_when_late
async def test_an_active_job_does_not_expire(backend: Backend) -> None:
    job = await enqueue_one(backend, ttl=TTL)
    running = await claim_one_before(backend, expiry(job))
    await asyncio.sleep(PAST_TTL)
    result = await claim(backend)
    assert result.expired == []
    assert (await fetch(backend, running.id)).state is JobState.ACTIVE


async def test_no_ttl_means_no_expiry(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job())
    await backend.configure_queue(QueueInfo("other", max_size=None, ttl=TTL))
    await asyncio.sleep(PAST_TTL)
    result = await claim(backend)
    assert result.expired == []
    assert ids(result.jobs) == [job.id]


# -- the effective TTL is stored, and bounds each wait -------------------------


async def test_the_effective_ttl_is_stored_on_the_job(backend: Backend) -> None:
    await backend.configure_queue(QueueInfo("q", max_size=None, ttl=10))
    job_shorter, queue_shorter, none = await enqueue(
        backend, new_job(queue="q", ttl=2), new_job(queue="q", ttl=50), new_job()
    )
    assert (job_shorter.ttl, queue_shorter.ttl, none.ttl) == (2, 10, None)
    stored = {j.id: j for j in await backend.get_jobs(ids([job_shorter, queue_shorter, none]))}
    assert stored[job_shorter.id].ttl == 2
    assert stored[queue_shorter.id].ttl == 10
    assert stored[none.id].ttl is None
    assert stored[queue_shorter.id].to_dict()["ttl"] == 10
    running = await claim_exact(backend, queue_shorter)
    assert running.ttl == 10


async def test_a_retry_waits_with_a_fresh_ttl_from_its_new_run_at(backend: Backend) -> None:
    await enqueue_one(backend, ttl=60)  # long: the claim must not come after it
    running = await claim_one(backend)
    await settle_ok(backend, running, Outcome.RETRY, error=error(), retry_delay=30)
    stored = await fetch(backend, running.id)
    assert stored.state is JobState.DELAYED
    assert stored.expires_at is not None
    assert abs(stored.expires_at - (stored.run_at + 60)) < 1e-3
    assert stored.ttl == 60


@again_when_late
async def test_a_retry_whose_backoff_is_longer_than_the_ttl_still_runs(backend: Backend) -> None:
    job = await enqueue_one(backend, ttl=TTL)
    running = await claim_one_before(backend, expiry(job))
    await settle_ok(backend, running, Outcome.RETRY, error=error(), retry_delay=PAST_TTL)
    deadline = (await fetch(backend, running.id)).expires_at
    assert deadline is not None
    await asyncio.sleep(PAST_TTL + 0.05)  # past the first deadline, the retry just due
    result = await claim_before(backend, deadline)
    assert result.expired == []
    assert ids(result.jobs) == [running.id]
    assert result.jobs[0].attempts == 2


@again_when_late
async def test_a_retry_still_expires_when_its_own_wait_passes_the_ttl(backend: Backend) -> None:
    job = await enqueue_one(backend, ttl=TTL)
    running = await claim_one_before(backend, expiry(job))
    await settle_ok(backend, running, Outcome.RETRY, error=error(), retry_delay=0.05)
    await asyncio.sleep(0.05 + PAST_TTL)
    result = await claim(backend)
    assert result.jobs == []
    assert ids(result.expired) == [running.id]
    assert result.expired[0].failure_reason is FailureReason.EXPIRED


@again_when_late
async def test_a_released_job_waits_with_a_fresh_ttl(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job(ttl=0.3))
    running = await claim_one_before(backend, expiry(job))
    await asyncio.sleep(0.2)
    before = await backend.now()
    await settle_ok(backend, running, Outcome.RELEASE)
    after = await backend.now()
    stored = await fetch(backend, job.id)
    assert stored.state is JobState.WAITING
    assert stored.run_at == job.run_at  # it keeps its place in line
    assert stored.expires_at is not None
    assert before + 0.3 <= stored.expires_at <= after + 0.3
    await asyncio.sleep(0.2)  # past the first deadline (run_at + 0.3), not the new one
    result = await claim_before(backend, stored.expires_at)
    assert result.expired == []
    assert ids(result.jobs) == [job.id]


@again_when_late
async def test_a_released_job_of_a_gone_worker_still_expires(backend: Backend) -> None:
    """A worker that shut down released its own queue's job and never came back."""
    queue = "worker.gone-456"
    await backend.configure_queue(QueueInfo(queue, max_size=None, ttl=TTL))
    (job,) = await enqueue(backend, new_job(queue=queue))
    running = await claim_one_before(backend, expiry(job), queue)
    await settle_ok(backend, running, Outcome.RELEASE)
    await asyncio.sleep(PAST_TTL)
    result = await claim(backend, ["default"])
    assert ids(result.expired) == [job.id]
    assert (await fetch(backend, job.id)).failure_reason is FailureReason.EXPIRED


@again_when_late
async def test_stall_recovery_gives_a_fresh_ttl(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job(ttl=0.3))
    await claim_one_before(backend, expiry(job), lease=0.2)
    await asyncio.sleep(0.27)
    before = await backend.now()
    result = await backend.recover_stalled(max_stalled=3)
    after = await backend.now()
    assert ids(result.requeued) == [job.id]
    stored = await fetch(backend, job.id)
    assert stored.state is JobState.WAITING
    assert stored.expires_at is not None
    assert before + 0.3 <= stored.expires_at <= after + 0.3
    await asyncio.sleep(0.1)  # past the first deadline (run_at + 0.3), not the new one
    claimed = await claim_before(backend, stored.expires_at)
    assert claimed.expired == []
    assert ids(claimed.jobs) == [job.id]


async def test_a_dead_letter_retry_keeps_the_effective_ttl(backend: Backend) -> None:
    # long: claimed well before
    await backend.configure_queue(QueueInfo("q", max_size=None, ttl=60))
    failed = await make_failed(backend, queue="q")
    # A later change of the queue's TTL does not reach jobs already enqueued.
    await backend.configure_queue(QueueInfo("q", max_size=None, ttl=None))
    before = await backend.now()
    copy = await backend.retry_failed(failed.id, new_id())
    after = await backend.now()
    assert copy.expires_at is not None
    assert before + 60 <= copy.expires_at <= after + 60
    assert (await fetch(backend, copy.id)).expires_at == copy.expires_at
    assert (failed.ttl, copy.ttl) == (60, 60)


async def test_no_ttl_stays_no_ttl_across_waits(backend: Backend) -> None:
    await enqueue_one(backend)
    running = await claim_one(backend)
    await settle_ok(backend, running, Outcome.RETRY, error=error(), retry_delay=0)
    again = await claim_one(backend)
    await settle_ok(backend, again, Outcome.RELEASE)
    stored = await fetch(backend, running.id)
    assert stored.expires_at is None
    assert stored.ttl is None

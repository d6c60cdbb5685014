"""cancel_job: pending jobs at once, active ones flagged for their worker, terminal ones kept."""

from __future__ import annotations

import asyncio

from conveyor.backends.base import Backend, Outcome
from conveyor.job import JobState

from .helpers import (
    claim,
    claim_one,
    enqueue,
    enqueue_one,
    fetch,
    make_finished,
    new_job,
    settle_ok,
)


async def test_waiting_job_is_cancelled_at_once(backend: Backend) -> None:
    job = await enqueue_one(backend)
    before = await backend.now()
    cancelled = await backend.cancel_job(job.id)
    assert cancelled is not None
    assert cancelled.id == job.id
    assert cancelled.state is JobState.CANCELLED
    assert cancelled.finished_at is not None
    assert cancelled.finished_at >= before
    stored = await fetch(backend, job.id)
    assert stored.state is JobState.CANCELLED
    assert stored.failure_reason is None
    assert (await claim(backend)).jobs == []


async def test_delayed_job_is_cancelled_at_once(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job(delay=0.05))
    cancelled = await backend.cancel_job(job.id)
    assert cancelled is not None
    assert cancelled.state is JobState.CANCELLED
    await asyncio.sleep(0.1)
    assert (await claim(backend)).jobs == []  # not promoted either
    assert (await fetch(backend, job.id)).state is JobState.CANCELLED


async def test_active_job_is_flagged_and_its_worker_told(backend: Backend) -> None:
    await enqueue_one(backend)
    running = await claim_one(backend)
    flagged = await backend.cancel_job(running.id)
    assert flagged is not None
    assert flagged.state is JobState.ACTIVE
    assert flagged.cancel_requested is True
    assert (await fetch(backend, running.id)).cancel_requested is True

    assert await backend.cancel_requests([running.id, "unknown"]) == {running.id}
    assert running.lease_token is not None
    renewed = await backend.renew_leases("worker-1", [(running.id, running.lease_token)], 30)
    assert renewed.renewed == {running.id}
    assert renewed.cancel_requested == {running.id}

    await settle_ok(backend, running, Outcome.CANCEL)
    stored = await fetch(backend, running.id)
    assert stored.state is JobState.CANCELLED
    assert stored.finished_at is not None
    assert await backend.cancel_requests([running.id]) == set()


async def test_cancel_requests_lists_only_flagged_active_jobs(backend: Backend) -> None:
    await enqueue(backend, new_job(), new_job())
    one, two = (await claim(backend, limit=2)).jobs
    waiting = await enqueue_one(backend, queue="later")
    await backend.cancel_job(one.id)
    assert await backend.cancel_requests([one.id, two.id, waiting.id]) == {one.id}
    renewed = await backend.renew_leases(
        "worker-1", [(j.id, j.lease_token or "") for j in (one, two)], 30
    )
    assert renewed.renewed == {one.id, two.id}
    assert renewed.cancel_requested == {one.id}


async def test_terminal_jobs_are_unchanged(backend: Backend) -> None:
    for state in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED):
        job = await make_finished(backend, state)
        after = await backend.cancel_job(job.id)
        assert after is not None
        assert after.state is state
        stored = await fetch(backend, job.id)
        assert stored.state is state
        assert stored.finished_at == job.finished_at
        assert stored.cancel_requested is False


async def test_cancel_of_a_missing_job(backend: Backend) -> None:
    assert await backend.cancel_job("no-such-job") is None

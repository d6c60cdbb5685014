"""settle_jobs outcomes: RETRY, FAIL, COMPLETE, CANCEL and RELEASE."""

from __future__ import annotations

import asyncio

import pytest

from conveyor import serialization
from conveyor.backends.base import Backend, Outcome, Settlement
from conveyor.job import FailureReason, JobState

from .helpers import (
    again_when_late,
    claim,
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


async def test_retry_delays_the_job_and_records_the_error(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend)
    before = await backend.now()
    await settle_ok(backend, job, Outcome.RETRY, error=error("first"), retry_delay=30)
    after = await backend.now()

    stored = await fetch(backend, job.id)
    assert stored.state is JobState.DELAYED
    assert before + 30 <= stored.run_at <= after + 30
    assert stored.attempts == 1
    assert stored.lease_token is None
    assert stored.lease_until is None
    assert stored.failure_reason is None
    assert stored.finished_at is None
    assert stored.error is not None
    assert stored.error.message == "first"
    assert stored.error.type == "RuntimeError"
    assert [e.message for e in stored.errors] == ["first"]
    assert (await claim(backend)).jobs == []


@again_when_late
async def test_retried_job_is_claimable_after_its_delay(backend: Backend) -> None:
    await enqueue_one(backend, max_attempts=5)
    job = await claim_one(backend)
    settled = await backend.now()
    await settle_ok(backend, job, Outcome.RETRY, error=error("one", attempt=1), retry_delay=0.2)
    not_yet = await claim(backend)
    await ran_before(backend, settled + 0.2, "the claim")  # before the retry was due
    assert not_yet.jobs == []

    await asyncio.sleep(0.27)
    again = await claim_one(backend)
    assert again.id == job.id
    assert again.attempts == 2
    assert again.lease_token != job.lease_token
    await settle_ok(backend, again, Outcome.RETRY, error=error("two", attempt=2), retry_delay=0)

    third = await claim_one(backend)
    assert third.attempts == 3
    assert [(e.message, e.attempt) for e in third.errors] == [("one", 1), ("two", 2)]
    assert third.error is not None
    assert third.error.message == "two"


async def test_error_history_keeps_every_field(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend)
    info = error("bad thing", type_="ValueError", attempt=1)
    info.traceback = "Traceback (most recent call last):\n  ...\nValueError: bad thing"
    info.reason = FailureReason.TIMEOUT.value
    info.at = 1234.5
    info.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    await settle_ok(backend, job, Outcome.RETRY, error=info, retry_delay=60)
    (stored,) = (await fetch(backend, job.id)).errors
    assert stored.to_dict() == info.to_dict()


@pytest.mark.parametrize(
    "reason",
    [
        FailureReason.ERROR,
        FailureReason.TIMEOUT,
        FailureReason.INVALID,
        FailureReason.UNKNOWN_TASK,
    ],
)
async def test_fail_records_the_reason(backend: Backend, reason: FailureReason) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend)
    before = await backend.now()
    await settle_ok(backend, job, Outcome.FAIL, error=error("nope"), failure_reason=reason)
    stored = await fetch(backend, job.id)
    assert stored.state is JobState.FAILED
    assert stored.failure_reason is reason
    assert stored.finished_at is not None
    assert stored.finished_at >= before
    assert stored.error is not None
    assert stored.error.message == "nope"
    assert stored.lease_token is None
    assert stored.lease_until is None
    assert stored.attempts == 1
    assert (await claim(backend)).jobs == []


async def test_fail_after_retries_keeps_the_whole_history(backend: Backend) -> None:
    await enqueue_one(backend, max_attempts=2)
    job = await claim_one(backend)
    await settle_ok(backend, job, Outcome.RETRY, error=error("a", attempt=1), retry_delay=0)
    job = await claim_one(backend)
    await settle_ok(
        backend, job, Outcome.FAIL, error=error("b", attempt=2), failure_reason=FailureReason.ERROR
    )
    stored = await fetch(backend, job.id)
    assert [e.message for e in stored.errors] == ["a", "b"]
    assert stored.error is not None
    assert stored.error.message == "b"
    assert stored.attempts == 2


async def test_complete_stores_the_result(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend)
    await settle_ok(backend, job, Outcome.COMPLETE, result=serialization.dumps({"sent": True}))
    stored = await fetch(backend, job.id)
    assert stored.state is JobState.COMPLETED
    assert stored.result == {"sent": True}
    assert stored.finished_at is not None
    assert stored.lease_token is None
    assert stored.lease_until is None
    assert stored.errors == []
    assert stored.failure_reason is None


async def test_cancel_outcome_ends_cancelled(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend)
    await settle_ok(backend, job, Outcome.CANCEL)
    stored = await fetch(backend, job.id)
    assert stored.state is JobState.CANCELLED
    assert stored.finished_at is not None
    assert stored.failure_reason is None
    assert (await claim(backend)).jobs == []


async def test_release_gives_the_attempt_back_and_keeps_the_place(backend: Backend) -> None:
    now = await backend.now()
    (older,) = await enqueue(backend, new_job(run_at=now - 10))
    job = await claim_one(backend)
    assert job.id == older.id
    assert job.attempts == 1
    (newer,) = await enqueue(backend, new_job())

    await settle_ok(backend, job, Outcome.RELEASE)
    stored = await fetch(backend, job.id)
    assert stored.state is JobState.WAITING
    assert stored.attempts == 0
    assert stored.run_at == older.run_at
    assert stored.worker_id is None
    assert stored.lease_token is None
    assert stored.lease_until is None
    assert stored.errors == []
    assert stored.finished_at is None

    result = await claim(backend, limit=1)
    assert ids(result.jobs) == [older.id]
    assert result.jobs[0].attempts == 1
    assert (await fetch(backend, newer.id)).state is JobState.WAITING


async def test_one_call_settles_a_mixed_batch(backend: Backend) -> None:
    await enqueue(backend, *(new_job() for _ in range(4)))
    a, b, c, d = (await claim(backend, limit=4)).jobs
    result = await backend.settle_jobs(
        [
            settlement(a, Outcome.COMPLETE, result=b"1"),
            settlement(b, Outcome.RETRY, error=error(), retry_delay=60),
            settlement(c, Outcome.FAIL, error=error(), failure_reason=FailureReason.ERROR),
            settlement(d, Outcome.RELEASE),
            settlement(a, Outcome.FAIL, failure_reason=FailureReason.ERROR),  # already settled
        ]
    )
    assert result.refused == {a.id}
    states = {j.id: j.state for j in await backend.get_jobs([a.id, b.id, c.id, d.id])}
    assert states == {
        a.id: JobState.COMPLETED,
        b.id: JobState.DELAYED,
        c.id: JobState.FAILED,
        d.id: JobState.WAITING,
    }


async def test_settle_of_a_job_that_was_never_claimed_is_refused(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job())
    result = await backend.settle_jobs([Settlement(job.id, "made-up", Outcome.COMPLETE)])
    assert result.refused == {job.id}
    assert (await fetch(backend, job.id)).state is JobState.WAITING

"""cancel_job: pending jobs at once, active ones flagged for their worker, terminal ones kept.

A pending cancel request wins over waiting again: RETRY, RELEASE and stall
recovery of a flagged job end it ``cancelled``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conveyor import serialization
from conveyor.backends.base import Backend, CircuitPolicy, CircuitState, Outcome
from conveyor.job import FailureReason, Job, JobState

from .helpers import (
    claim,
    claim_one,
    enqueue,
    enqueue_one,
    error,
    fetch,
    ids,
    make_finished,
    new_job,
    settle_ok,
    settlement,
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


# -- a pending cancel wins over waiting again ----------------------------------


async def flagged(backend: Backend, **options: Any) -> Job:
    """A claimed job that another process asked to cancel (only the flag is set)."""
    lease = options.pop("lease", 30.0)
    await enqueue_one(backend, **options)
    running = await claim_one(backend, lease=lease)
    marked = await backend.cancel_job(running.id)
    assert marked is not None
    assert marked.cancel_requested
    return running


async def test_a_pending_cancel_wins_over_retry(backend: Backend) -> None:
    running = await flagged(backend)
    before = await backend.now()
    result = await settle_ok(
        backend, running, Outcome.RETRY, error=error("failed meanwhile"), retry_delay=0
    )
    stored = await fetch(backend, running.id)
    assert stored.state is JobState.CANCELLED
    assert result.cancelled == {running.id}
    assert stored.finished_at is not None
    assert stored.finished_at >= before
    assert stored.failure_reason is None
    assert stored.attempts == 1
    assert stored.lease_token is None
    assert stored.lease_until is None
    assert [e.message for e in stored.errors] == ["failed meanwhile"]
    assert (await claim(backend)).jobs == []  # never runs again
    assert await backend.cancel_requests([running.id]) == set()


async def test_a_pending_cancel_wins_over_release(backend: Backend) -> None:
    running = await flagged(backend)
    before = await backend.now()
    result = await settle_ok(backend, running, Outcome.RELEASE)
    stored = await fetch(backend, running.id)
    assert stored.state is JobState.CANCELLED
    assert result.cancelled == {running.id}
    assert stored.finished_at is not None
    assert stored.finished_at >= before
    assert stored.errors == []
    assert (await claim(backend)).jobs == []


async def test_a_cancelled_release_keeps_the_error_it_was_given(backend: Backend) -> None:
    running = await flagged(backend)
    await settle_ok(backend, running, Outcome.RELEASE, error=error("shutting down"))
    stored = await fetch(backend, running.id)
    assert stored.state is JobState.CANCELLED
    assert [e.message for e in stored.errors] == ["shutting down"]


@pytest.mark.parametrize(
    ("outcome", "state"),
    [(Outcome.FAIL, JobState.FAILED), (Outcome.COMPLETE, JobState.COMPLETED)],
)
async def test_fail_and_complete_are_unchanged_by_a_pending_cancel(
    backend: Backend, outcome: Outcome, state: JobState
) -> None:
    running = await flagged(backend)
    fields: dict[str, Any] = (
        {"error": error(), "failure_reason": FailureReason.ERROR}
        if outcome is Outcome.FAIL
        else {"result": serialization.dumps("done")}
    )
    result = await settle_ok(backend, running, outcome, **fields)
    assert result.cancelled == set()
    assert (await fetch(backend, running.id)).state is state


async def test_only_the_flagged_jobs_of_a_batch_are_cancelled(backend: Backend) -> None:
    await enqueue(backend, new_job(), new_job(), new_job(), new_job())
    a, b, c, d = (await claim(backend, limit=4)).jobs
    await backend.cancel_job(a.id)
    await backend.cancel_job(c.id)
    result = await backend.settle_jobs(
        [
            settlement(a, Outcome.RETRY, error=error(), retry_delay=60),
            settlement(b, Outcome.RETRY, error=error(), retry_delay=60),
            settlement(c, Outcome.RELEASE),
            settlement(d, Outcome.RELEASE),
        ]
    )
    assert result.refused == set()
    states = {j.id: j.state for j in await backend.get_jobs(ids([a, b, c, d]))}
    assert states == {
        a.id: JobState.CANCELLED,
        b.id: JobState.DELAYED,
        c.id: JobState.CANCELLED,
        d.id: JobState.WAITING,
    }
    assert result.cancelled == {a.id, c.id}


async def test_a_cancelled_retry_still_counts_in_the_circuit(backend: Backend) -> None:
    policy = CircuitPolicy(threshold=1, open_for=60)
    running = await flagged(backend, task="flaky")
    result = await settle_ok(
        backend, running, Outcome.RETRY, error=error(), retry_delay=0, circuit=policy
    )
    assert result.cancelled == {running.id}
    (change,) = result.circuit_changes
    assert (change.task, change.state) == ("flaky", CircuitState.OPEN)


async def test_a_stalled_job_with_a_pending_cancel_is_cancelled(backend: Backend) -> None:
    running = await flagged(backend, max_attempts=5, lease=0.2)
    await asyncio.sleep(0.27)
    before = await backend.now()
    result = await backend.recover_stalled(max_stalled=3)
    assert result.requeued == []
    assert result.failed == []
    stored = await fetch(backend, running.id)
    assert stored.state is JobState.CANCELLED
    assert ids(result.cancelled) == [running.id]
    assert result.cancelled[0].state is JobState.CANCELLED
    assert stored.failure_reason is None
    assert stored.finished_at is not None
    assert stored.finished_at >= before
    assert stored.stalls == 1
    assert stored.lease_token is None
    assert stored.lease_until is None
    assert [e.type for e in stored.errors] == ["Stalled"]
    assert (await claim(backend)).jobs == []
    assert (await backend.recover_stalled(max_stalled=3)).cancelled == []  # reported once


async def test_a_pending_cancel_wins_over_a_stalled_last_attempt(backend: Backend) -> None:
    running = await flagged(backend, max_attempts=1, lease=0.2)
    await asyncio.sleep(0.27)
    result = await backend.recover_stalled(max_stalled=3)
    assert result.failed == []
    stored = await fetch(backend, running.id)
    assert stored.state is JobState.CANCELLED
    assert stored.failure_reason is None
    assert ids(result.cancelled) == [running.id]


async def test_stall_recovery_without_a_cancel_request_lists_no_cancelled(
    backend: Backend,
) -> None:
    await enqueue(backend, new_job(), new_job(max_attempts=1))
    await claim(backend, lease=0.2, limit=2)
    await asyncio.sleep(0.27)
    result = await backend.recover_stalled(max_stalled=3)
    assert result.cancelled == []
    assert len(result.requeued) == 1
    assert len(result.failed) == 1

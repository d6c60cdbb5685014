"""Leases: renewal, loss, stall recovery, max_stalled, and fencing by token (G4, G5)."""

from __future__ import annotations

import asyncio

import pytest

from conveyor import serialization
from conveyor.backends.base import Backend, CircuitPolicy, ClaimRequest, Outcome, Settlement
from conveyor.job import FailureReason, Job, JobState

from .helpers import (
    CLOCK_SLACK,
    LONG_LEASE,
    claim,
    claim_one,
    enqueue,
    enqueue_one,
    error,
    fail_run,
    fetch,
    new_job,
    settle,
    settle_ok,
    settlement,
)

SHORT = 0.2  # a lease that expires during the test
PAST_SHORT = 0.27  # sleep this long for a SHORT lease to have expired


def lease_of(job: Job) -> tuple[str, str]:
    assert job.lease_token is not None
    return job.id, job.lease_token


async def stalled_and_reclaimed(backend: Backend) -> tuple[Job, Job]:
    """A job claimed under a short lease, recovered as stalled, and claimed again."""
    await enqueue_one(backend, max_attempts=5)
    first = await claim_one(backend, lease=SHORT, worker_id="old")
    await asyncio.sleep(PAST_SHORT)
    recovered = await backend.recover_stalled(max_stalled=3)
    assert [j.id for j in recovered.requeued] == [first.id]
    second = await claim_one(backend, worker_id="new")
    assert second.id == first.id
    assert second.lease_token != first.lease_token
    return first, second


async def test_renew_extends_the_lease_from_backend_now(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend, lease=1)
    await asyncio.sleep(0.05)
    before = await backend.now()
    result = await backend.renew_leases("worker-1", [lease_of(job)], 10)
    after = await backend.now()
    assert result.renewed == {job.id}
    assert result.lost == set()
    assert result.cancel_requested == set()
    stored = await fetch(backend, job.id)
    assert stored.lease_until is not None
    assert before + 10 <= stored.lease_until <= after + 10
    assert stored.lease_token == job.lease_token
    assert stored.state is JobState.ACTIVE


async def test_renew_many_at_once(backend: Backend) -> None:
    await enqueue(backend, *(new_job() for _ in range(5)))
    jobs = (await claim(backend, lease=1)).jobs
    result = await backend.renew_leases("worker-1", [lease_of(j) for j in jobs], 10)
    assert result.renewed == {j.id for j in jobs}
    assert result.lost == set()


async def test_renew_of_an_unknown_job_is_lost(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend, lease=5)
    result = await backend.renew_leases("worker-1", [("no-such-job", "x"), lease_of(job)], 10)
    assert result.renewed == {job.id}
    assert result.lost == {"no-such-job"}


async def test_renew_wrong_token_alone_is_lost(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend, lease=5)
    result = await backend.renew_leases("worker-1", [(job.id, "not-the-token")], 60)
    assert result.lost == {job.id}
    assert result.renewed == set()
    stored = await fetch(backend, job.id)
    assert stored.lease_until == job.lease_until


async def test_renew_of_a_settled_job_is_lost(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend)
    await settle_ok(backend, job, Outcome.COMPLETE)
    result = await backend.renew_leases("worker-1", [lease_of(job)], 10)
    assert result.lost == {job.id}
    assert result.renewed == set()
    assert (await fetch(backend, job.id)).state is JobState.COMPLETED


async def test_expired_lease_is_recovered_to_waiting(backend: Backend) -> None:
    queued = await enqueue_one(backend)
    job = await claim_one(backend, lease=SHORT)
    await asyncio.sleep(PAST_SHORT)
    result = await backend.recover_stalled(max_stalled=3)
    assert [j.id for j in result.requeued] == [job.id]
    assert result.failed == []
    stored = await fetch(backend, job.id)
    assert stored.state is JobState.WAITING
    assert stored.stalls == 1
    assert stored.attempts == 1  # the attempt was counted at claim and stays counted
    assert stored.lease_until is None
    assert stored.lease_token is None
    assert stored.worker_id is None
    assert stored.run_at == queued.run_at
    assert stored.error is not None
    assert stored.error.type == "Stalled"
    assert len(stored.errors) == 1
    again = await claim_one(backend)
    assert again.attempts == 2
    assert again.stalls == 1


async def test_live_lease_is_not_recovered(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend, lease=5)
    result = await backend.recover_stalled(max_stalled=3)
    assert result.requeued == []
    assert result.failed == []
    assert (await fetch(backend, job.id)).state is JobState.ACTIVE


async def test_renewed_lease_is_not_recovered(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend, lease=SHORT)
    renewed = await backend.renew_leases("worker-1", [lease_of(job)], 5)
    assert renewed.renewed == {job.id}
    await asyncio.sleep(PAST_SHORT)
    result = await backend.recover_stalled(max_stalled=3)
    assert result.requeued == []
    assert result.failed == []
    assert (await fetch(backend, job.id)).state is JobState.ACTIVE


async def test_only_the_expired_ones_of_a_batch_are_recovered(backend: Backend) -> None:
    await enqueue(backend, new_job(queue="short"), new_job(queue="long"))
    short = await claim_one(backend, "short", lease=SHORT)
    long = await claim_one(backend, "long", lease=5)
    await asyncio.sleep(PAST_SHORT)
    result = await backend.recover_stalled(max_stalled=3)
    assert [j.id for j in result.requeued] == [short.id]
    assert (await fetch(backend, long.id)).state is JobState.ACTIVE


async def test_max_stalled_fails_the_job_as_stalled(backend: Backend) -> None:
    await enqueue_one(backend, max_attempts=10)
    for round_ in (1, 2):
        job = await claim_one(backend, lease=SHORT)
        await asyncio.sleep(PAST_SHORT)
        result = await backend.recover_stalled(max_stalled=1)
        if round_ == 1:
            assert [j.id for j in result.requeued] == [job.id]
            assert result.failed == []
        else:
            assert [j.id for j in result.failed] == [job.id]
            assert result.requeued == []
    stored = await fetch(backend, job.id)
    assert stored.state is JobState.FAILED
    assert stored.failure_reason is FailureReason.STALLED
    assert stored.finished_at is not None
    assert stored.lease_token is None
    assert stored.lease_until is None
    assert [e.type for e in stored.errors] == ["Stalled", "Stalled"]
    assert result.failed[0].state is JobState.FAILED


async def test_max_stalled_zero_fails_at_the_first_stall(backend: Backend) -> None:
    await enqueue_one(backend, max_attempts=10)
    job = await claim_one(backend, lease=SHORT)
    await asyncio.sleep(PAST_SHORT)
    result = await backend.recover_stalled(max_stalled=0)
    assert [j.id for j in result.failed] == [job.id]
    assert (await fetch(backend, job.id)).failure_reason is FailureReason.STALLED


async def test_last_attempt_stalled_fails_at_once(backend: Backend) -> None:
    """G5: attempts are counted at claim, so a job that kills its worker is bounded."""
    await enqueue_one(backend, max_attempts=2)
    for _ in range(2):
        job = await claim_one(backend, lease=SHORT)
        await asyncio.sleep(PAST_SHORT)
        result = await backend.recover_stalled(max_stalled=3)
    assert [j.id for j in result.failed] == [job.id]
    stored = await fetch(backend, job.id)
    assert stored.state is JobState.FAILED
    assert stored.failure_reason is FailureReason.STALLED
    assert stored.attempts == 2
    assert (await claim(backend)).jobs == []


async def test_stale_settle_after_reclaim_is_refused_and_changes_nothing(
    backend: Backend,
) -> None:
    first, second = await stalled_and_reclaimed(backend)
    for outcome in Outcome:
        result = await settle(
            backend, first, outcome, result=serialization.dumps("stale"), retry_delay=60
        )
        assert result.refused == {first.id}, outcome
    stored = await fetch(backend, second.id)
    assert stored.state is JobState.ACTIVE
    assert stored.lease_token == second.lease_token
    assert stored.lease_until == second.lease_until
    assert stored.worker_id == "new"
    assert stored.attempts == 2
    assert stored.result is None
    # the current holder still settles fine
    await settle_ok(backend, second, Outcome.COMPLETE, result=serialization.dumps("fresh"))
    assert (await fetch(backend, second.id)).result == "fresh"


@pytest.mark.parametrize("with_claim", [False, True], ids=["settle_jobs", "settle_and_claim"])
async def test_a_stale_and_the_current_outcome_of_one_job_in_one_batch(
    backend: Backend, with_claim: bool
) -> None:
    """A worker may hold two outcomes of one job: the first claim's (lost to a
    store crash or recovered, so its token is stale) and the reclaim's. Sent in
    one batch, stale first, each is judged by its own token: the current one
    is stored, whichever way the worker sends its outcomes."""
    first, second = await stalled_and_reclaimed(backend)
    batch = [
        settlement(first, Outcome.COMPLETE, result=serialization.dumps("stale")),
        settlement(second, Outcome.COMPLETE, result=serialization.dumps("fresh")),
    ]
    if with_claim:
        request = ClaimRequest(worker_id="new", queues=("default",), limit=10, lease=LONG_LEASE)
        await backend.settle_and_claim(batch, request)
    else:
        await backend.settle_jobs(batch)
    stored = await fetch(backend, second.id)
    assert stored.state is JobState.COMPLETED
    assert stored.result == "fresh"


async def test_stale_renew_after_reclaim_is_lost_and_changes_nothing(backend: Backend) -> None:
    first, second = await stalled_and_reclaimed(backend)
    result = await backend.renew_leases("old", [lease_of(first)], 600)
    assert result.lost == {first.id}
    assert result.renewed == set()
    stored = await fetch(backend, second.id)
    assert stored.lease_until == second.lease_until
    current = await backend.renew_leases("new", [lease_of(second)], 5)
    assert current.renewed == {second.id}


async def test_stale_progress_after_reclaim_is_refused(backend: Backend) -> None:
    first, second = await stalled_and_reclaimed(backend)
    refused = await backend.save_progress([(first.id, first.lease_token or "", b'{"p": 1}')])
    assert refused == {first.id}
    assert (await fetch(backend, second.id)).progress is None
    refused = await backend.save_progress([(second.id, second.lease_token or "", b'{"p": 2}')])
    assert refused == set()
    assert (await fetch(backend, second.id)).progress == {"p": 2}


async def test_settling_twice_is_refused_the_second_time(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend)
    await settle_ok(backend, job, Outcome.COMPLETE, result=serialization.dumps(1))
    again = await settle(backend, job, Outcome.FAIL, failure_reason=FailureReason.ERROR)
    assert again.refused == {job.id}
    stored = await fetch(backend, job.id)
    assert stored.state is JobState.COMPLETED
    assert stored.result == 1


async def test_one_batch_settles_mixed_outcomes(backend: Backend) -> None:
    """Plain completions (one counted in its task's circuit), a result, a failure,
    a release and a stale token in one batch: each job gets its own outcome."""
    policy = CircuitPolicy(threshold=3, open_for=60.0)
    for _ in range(2):
        await fail_run(backend, "flaky", policy)
    jobs = await enqueue(backend, *[new_job() for _ in range(5)], new_job("flaky"))
    running = {j.id: j for j in (await claim(backend, limit=6)).jobs}
    plain, with_result, failed, released, stale, counted = (running[j.id] for j in jobs)
    result = await backend.settle_jobs(
        [
            settlement(plain, Outcome.COMPLETE),
            settlement(counted, Outcome.COMPLETE, circuit=policy),
            settlement(with_result, Outcome.COMPLETE, result=serialization.dumps([1, 2])),
            settlement(failed, Outcome.FAIL, error=error(), failure_reason=FailureReason.ERROR),
            Settlement(stale.id, "stale-token", Outcome.COMPLETE, stale.task),
            settlement(released, Outcome.RELEASE),
        ]
    )
    assert result.refused == {stale.id}
    states = {j.id: (await fetch(backend, j.id)).state for j in jobs}
    assert states == {
        plain.id: JobState.COMPLETED,
        with_result.id: JobState.COMPLETED,
        failed.id: JobState.FAILED,
        released.id: JobState.WAITING,
        stale.id: JobState.ACTIVE,
        counted.id: JobState.COMPLETED,
    }
    assert (await fetch(backend, with_result.id)).result == [1, 2]
    for job in (plain, counted):
        stored = await fetch(backend, job.id)
        assert stored.result is None
        assert stored.errors == []
        assert stored.lease_token is None
        assert stored.lease_until is None
        assert stored.finished_at is not None
    circuit = next(c for c in await backend.list_circuits() if c.task == "flaky")
    assert circuit.failures == 0  # the success reset the two failures before it


async def test_progress_is_saved_under_the_token(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend)
    token = job.lease_token or ""
    assert await backend.save_progress([(job.id, token, b'{"pct": 50, "phase": "x"}')]) == set()
    assert (await fetch(backend, job.id)).progress == {"pct": 50, "phase": "x"}
    assert await backend.save_progress([(job.id, "wrong", b"99")]) == {job.id}
    assert await backend.save_progress([("missing", token, b"1")]) == {"missing"}
    assert (await fetch(backend, job.id)).progress == {"pct": 50, "phase": "x"}


async def test_settle_stores_unsaved_progress(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend)
    await settle_ok(backend, job, Outcome.COMPLETE, progress=b"100")
    assert (await fetch(backend, job.id)).progress == 100


async def test_lease_until_tracks_the_backend_clock(backend: Backend) -> None:
    await enqueue_one(backend)
    now = await backend.now()
    job = await claim_one(backend, lease=0.5)
    assert job.lease_until is not None
    assert abs(job.lease_until - (now + 0.5)) < CLOCK_SLACK

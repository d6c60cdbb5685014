"""Circuit breaker: per task, cluster-wide, opened and closed by settlements."""

from __future__ import annotations

import asyncio

from conveyor.backends.base import (
    Backend,
    CircuitInfo,
    CircuitPolicy,
    CircuitState,
    JobFilter,
    Outcome,
)
from conveyor.job import FailureReason, JobState

from .helpers import (
    again_when_late,
    claim,
    claim_exact,
    enqueue,
    enqueue_one,
    error,
    fail_run,
    new_job,
    ran_before,
    settle_ok,
    settlement,
)

POLICY = CircuitPolicy(threshold=3, open_for=0.2)
PAST_OPEN = 0.27
#: For tests that only need the circuit open: no pause of the host outlasts it.
STAYS_OPEN = CircuitPolicy(threshold=3, open_for=60)


async def circuit_of(backend: Backend, task: str) -> CircuitInfo | None:
    return next((c for c in await backend.list_circuits() if c.task == task), None)


async def open_circuit(
    backend: Backend, task: str = "flaky", policy: CircuitPolicy = POLICY
) -> None:
    for _ in range(policy.threshold):
        await fail_run(backend, task, policy)
    info = await circuit_of(backend, task)
    assert info is not None
    assert info.state is CircuitState.OPEN


async def test_threshold_consecutive_failures_open_it(backend: Backend) -> None:
    for _ in range(POLICY.threshold - 1):
        result = await fail_run(backend, "flaky", POLICY)
        assert result.circuit_changes == []
    info = await circuit_of(backend, "flaky")
    assert info is None or (info.state is CircuitState.CLOSED and info.failures == 2)

    before = await backend.now()
    result = await fail_run(backend, "flaky", POLICY)
    after = await backend.now()
    (change,) = result.circuit_changes
    assert change.task == "flaky"
    assert change.state is CircuitState.OPEN
    info = await circuit_of(backend, "flaky")
    assert info is not None
    assert info.state is CircuitState.OPEN
    assert info.failures == 3
    assert info.open_until is not None
    assert before + POLICY.open_for <= info.open_until <= after + POLICY.open_for


async def test_retry_counts_as_a_failure(backend: Backend) -> None:
    for _ in range(POLICY.threshold):
        job = await enqueue_one(backend, "flaky")
        running = await claim_exact(backend, job)
        result = await settle_ok(
            backend, running, Outcome.RETRY, error=error(), retry_delay=60, circuit=POLICY
        )
    assert [c.state for c in result.circuit_changes] == [CircuitState.OPEN]


async def test_a_success_resets_the_count(backend: Backend) -> None:
    for _ in range(2):
        await fail_run(backend, "flaky", POLICY)
    job = await enqueue_one(backend, "flaky")
    running = await claim_exact(backend, job)
    assert (
        await settle_ok(backend, running, Outcome.COMPLETE, circuit=POLICY)
    ).circuit_changes == []
    for _ in range(2):
        assert (await fail_run(backend, "flaky", POLICY)).circuit_changes == []
    info = await circuit_of(backend, "flaky")
    assert info is not None
    assert info.state is CircuitState.CLOSED
    assert info.failures == 2


async def test_outcomes_of_one_batch_count_in_order(backend: Backend) -> None:
    # A success resets the count even right after a success and a failure of
    # the same batch: 2 failures at the end, below the threshold of 3.
    outcomes = [Outcome.COMPLETE, Outcome.FAIL, Outcome.COMPLETE, Outcome.FAIL, Outcome.FAIL]
    await enqueue(backend, *(new_job("flaky") for _ in outcomes))
    running = (await claim(backend, limit=len(outcomes))).jobs
    assert len(running) == len(outcomes)
    failed = {"error": error(), "failure_reason": FailureReason.ERROR}
    result = await backend.settle_jobs(
        [
            settlement(job, outcome, circuit=POLICY, **(failed if outcome is Outcome.FAIL else {}))
            for job, outcome in zip(running, outcomes, strict=True)
        ]
    )
    assert result.refused == set()
    assert result.circuit_changes == []
    info = await circuit_of(backend, "flaky")
    assert info is not None
    assert (info.state, info.failures) == (CircuitState.CLOSED, 2)


async def test_runs_without_a_policy_do_not_count(backend: Backend) -> None:
    for _ in range(POLICY.threshold + 2):
        job = await enqueue_one(backend, "t")
        running = await claim_exact(backend, job)
        await settle_ok(
            backend, running, Outcome.FAIL, error=error(), failure_reason=FailureReason.INVALID
        )
    info = await circuit_of(backend, "t")
    assert info is None or info.state is CircuitState.CLOSED
    await enqueue_one(backend, "t")
    assert len((await claim(backend)).jobs) == 1


async def test_open_task_is_not_claimed_but_others_are(backend: Backend) -> None:
    await open_circuit(backend, policy=STAYS_OPEN)
    flaky = [new_job("flaky") for _ in range(3)]
    await enqueue(backend, *flaky, new_job("healthy"))
    result = await claim(backend, limit=10)
    assert [j.task for j in result.jobs] == ["healthy"]
    assert await backend.count_jobs(_waiting("flaky")) == 3


async def test_open_circuit_is_shared_by_instances(backend_pair: tuple[Backend, Backend]) -> None:
    first, second = backend_pair
    await open_circuit(first, policy=STAYS_OPEN)
    await enqueue(second, new_job("flaky"))
    assert (await claim(second)).jobs == []
    info = await circuit_of(second, "flaky")
    assert info is not None
    assert info.state is CircuitState.OPEN


@again_when_late
async def test_half_open_admits_exactly_one_trial(backend: Backend) -> None:
    await open_circuit(backend)
    await backend.enqueue_jobs([new_job("flaky") for _ in range(5)])
    await asyncio.sleep(PAST_OPEN)
    before = await backend.now()
    trial = await claim(backend, limit=10)
    assert [j.task for j in trial.jobs] == ["flaky"]
    info = await circuit_of(backend, "flaky")
    assert info is not None
    assert info.state is CircuitState.HALF_OPEN
    assert info.open_until is not None
    assert info.open_until >= before + POLICY.open_for
    # a second claimer gets nothing while the trial runs (a lost trial is retried later)
    second = await claim(backend, limit=10, worker_id="other")
    await ran_before(backend, before + POLICY.open_for, "the second claim")
    assert second.jobs == []


@again_when_late
async def test_concurrent_claims_share_one_trial(backend: Backend) -> None:
    await open_circuit(backend)
    await backend.enqueue_jobs([new_job("flaky") for _ in range(5)])
    await asyncio.sleep(PAST_OPEN)
    before = await backend.now()
    results = await asyncio.gather(*(claim(backend, limit=10, worker_id=f"w{i}") for i in range(8)))
    # All within the trial's own open period, which begins no earlier than `before`.
    await ran_before(backend, before + POLICY.open_for, "the claims")
    assert sum(len(r.jobs) for r in results) == 1


async def test_successful_trial_closes_it(backend: Backend) -> None:
    await open_circuit(backend)
    await backend.enqueue_jobs([new_job("flaky") for _ in range(4)])
    await asyncio.sleep(PAST_OPEN)
    (trial,) = (await claim(backend, limit=10)).jobs
    result = await settle_ok(backend, trial, Outcome.COMPLETE, circuit=POLICY)
    (change,) = result.circuit_changes
    assert change.task == "flaky"
    assert change.state is CircuitState.CLOSED
    info = await circuit_of(backend, "flaky")
    assert info is None or (info.state is CircuitState.CLOSED and info.failures == 0)
    assert len((await claim(backend, limit=10)).jobs) == 3


@again_when_late
async def test_failed_trial_reopens_it(backend: Backend) -> None:
    await open_circuit(backend)
    await backend.enqueue_jobs([new_job("flaky") for _ in range(4)])
    await asyncio.sleep(PAST_OPEN)
    (trial,) = (await claim(backend, limit=10)).jobs
    before = await backend.now()
    result = await settle_ok(
        backend,
        trial,
        Outcome.FAIL,
        error=error(),
        failure_reason=FailureReason.ERROR,
        circuit=POLICY,
    )
    (change,) = result.circuit_changes
    assert change.state is CircuitState.OPEN
    info = await circuit_of(backend, "flaky")
    assert info is not None
    assert info.state is CircuitState.OPEN
    assert info.open_until is not None
    assert info.open_until >= before + POLICY.open_for
    still_open = await claim(backend, limit=10)
    await ran_before(backend, before + POLICY.open_for, "the claim")
    assert still_open.jobs == []
    # ... and the next open period ends with another single trial
    await asyncio.sleep(PAST_OPEN)
    assert len((await claim(backend, limit=10)).jobs) == 1


@again_when_late
async def test_a_lost_trial_is_retried_after_another_open_period(backend: Backend) -> None:
    await open_circuit(backend)
    await backend.enqueue_jobs([new_job("flaky") for _ in range(3)])
    await asyncio.sleep(PAST_OPEN)
    before = await backend.now()
    assert len((await claim(backend, limit=10)).jobs) == 1  # the trial, never settled
    during_trial = await claim(backend, limit=10)
    await ran_before(backend, before + POLICY.open_for, "the second claim")
    assert during_trial.jobs == []
    await asyncio.sleep(PAST_OPEN)
    assert len((await claim(backend, limit=10)).jobs) == 1


async def test_reset_circuit(backend: Backend) -> None:
    await open_circuit(backend, policy=STAYS_OPEN)
    await backend.enqueue_jobs([new_job("flaky") for _ in range(2)])
    assert (await claim(backend, limit=10)).jobs == []
    await backend.reset_circuit("flaky")
    info = await circuit_of(backend, "flaky")
    assert info is None or (info.state is CircuitState.CLOSED and info.failures == 0)
    assert len((await claim(backend, limit=10)).jobs) == 2
    await backend.reset_circuit("never-heard-of")  # no error


async def test_clear_circuit_failures_forgets_closed_counts_only(backend: Backend) -> None:
    await open_circuit(backend, "open-one", policy=STAYS_OPEN)
    for task in ("a", "b"):
        await fail_run(backend, task, POLICY)
        await fail_run(backend, task, POLICY)
    await backend.clear_circuit_failures("a")
    circuits = {c.task: c for c in await backend.list_circuits()}
    assert (circuits["a"].state, circuits["a"].failures) == (CircuitState.CLOSED, 0)
    assert circuits["b"].failures == 2
    await backend.clear_circuit_failures(None)  # every closed circuit
    circuits = {c.task: c for c in await backend.list_circuits()}
    assert circuits["b"].failures == 0
    assert (circuits["open-one"].state, circuits["open-one"].failures) == (CircuitState.OPEN, 3)
    # A count that starts again from zero needs the full threshold to open.
    await fail_run(backend, "a", POLICY)
    await fail_run(backend, "a", POLICY)
    assert (await circuit_of(backend, "a")) == CircuitInfo("a", CircuitState.CLOSED, 2)
    await backend.clear_circuit_failures("never-heard-of")  # no error


async def test_circuit_tasks_false_ignores_circuits(backend: Backend) -> None:
    await open_circuit(backend, policy=STAYS_OPEN)
    await backend.enqueue_jobs([new_job("flaky") for _ in range(2)])
    assert len((await claim(backend, limit=10, circuit_tasks=False)).jobs) == 2


async def test_list_circuits(backend: Backend) -> None:
    await open_circuit(backend, "a")
    await fail_run(backend, "b", POLICY)
    circuits = {c.task: c for c in await backend.list_circuits()}
    assert circuits["a"].state is CircuitState.OPEN
    assert circuits["a"].failures == 3
    assert circuits["b"].state is CircuitState.CLOSED
    assert circuits["b"].failures == 1
    assert circuits["a"].to_dict()["state"] == "open"


def _waiting(task: str) -> JobFilter:
    return JobFilter(states=[JobState.WAITING], task=task)

"""Settling in memory: outcomes (and the circuits they count), lease renewal,
progress and cancel requests of held jobs."""

from __future__ import annotations

from collections.abc import Sequence

from conveyor.backends.base import (
    CircuitInfo,
    CircuitPolicy,
    CircuitState,
    Outcome,
    RenewResult,
    Settlement,
    SettleResult,
)
from conveyor.backends.memory.store import Circuit, Row, Store, copy_error, deadline
from conveyor.job import FailureReason, JobState


def _held(store: Store, job_id: str, token: str) -> Row | None:
    row = store.jobs.get(job_id)
    if row is None or row.state is not JobState.ACTIVE or row.lease_token != token:
        return None
    return row


def renew_leases(store: Store, leases: Sequence[tuple[str, str]], lease: float) -> RenewResult:
    now = store.now()
    out = RenewResult()
    for job_id, token in leases:
        row = _held(store, job_id, token)
        if row is None:
            out.lost.add(job_id)
            continue
        row.lease_until = now + lease
        out.renewed.add(job_id)
        if row.cancel_requested:
            out.cancel_requested.add(job_id)
    return out


def _count_run(
    store: Store, task: str, policy: CircuitPolicy, success: bool, now: float
) -> CircuitInfo | None:
    circuit = store.circuits.get(task)
    if success:
        if circuit is None:
            return None
        changed = circuit.state is not CircuitState.CLOSED
        circuit.state = CircuitState.CLOSED
        circuit.failures = 0
        circuit.open_until = None
    else:
        if circuit is None:
            circuit = store.circuits[task] = Circuit()
        circuit.failures += 1
        circuit.open_for = policy.open_for
        opens = circuit.state is CircuitState.HALF_OPEN or (
            circuit.state is CircuitState.CLOSED
            and policy.threshold > 0
            and circuit.failures >= policy.threshold
        )
        changed = opens
        if opens:
            circuit.state = CircuitState.OPEN
            circuit.open_until = now + policy.open_for
    if not changed:
        return None
    return CircuitInfo(task, circuit.state, circuit.failures, circuit.open_until)


def settle_jobs(store: Store, settlements: Sequence[Settlement]) -> SettleResult:
    now = store.now()
    out = SettleResult()
    woken: set[str] = set()
    timer = False
    for item in settlements:
        row = _held(store, item.job_id, item.lease_token)
        if row is None:
            out.refused.add(item.job_id)
            continue
        row.lease_until = None
        row.lease_token = None
        if item.progress is not None:
            row.progress = bytes(item.progress)
        if item.error is not None and item.outcome is not Outcome.COMPLETE:
            row.errors += (copy_error(item.error),)
        outcome = item.outcome
        if row.cancel_requested and outcome in (Outcome.RETRY, Outcome.RELEASE):
            # A pending cancel wins: the job would wait again, so it ends here.
            outcome = Outcome.CANCEL
            out.cancelled.add(item.job_id)
        if outcome is Outcome.COMPLETE:
            row.result = bytes(item.result) if item.result is not None else None
            row.finished_at = now
            store.move(row, JobState.COMPLETED)
        elif outcome is Outcome.RETRY:
            row.run_at = now + item.retry_delay
            row.expires_at = deadline(row.run_at, row.ttl)
            row.worker_id = None
            store.move(row, JobState.DELAYED)
            timer = True
        elif outcome is Outcome.FAIL:
            row.failure_reason = item.failure_reason or FailureReason.ERROR
            row.finished_at = now
            store.move(row, JobState.FAILED)
        elif outcome is Outcome.CANCEL:
            row.finished_at = now
            store.move(row, JobState.CANCELLED)
        elif item.retry_delay > 0:  # RELEASE for later: delayed, the attempt given back
            row.attempts = max(0, row.attempts - 1)
            row.run_at = now + item.retry_delay
            row.expires_at = deadline(row.run_at, row.ttl)
            row.worker_id = None
            store.move(row, JobState.DELAYED)
            timer = True
        else:  # RELEASE: back in its place, the attempt given back, a fresh TTL
            row.attempts = max(0, row.attempts - 1)
            row.expires_at = deadline(now, row.ttl)
            row.worker_id = None
            store.move(row, JobState.WAITING)
            woken.add(row.queue)
        # The circuit counts the run as the worker reported it (a failed run
        # is a failure even when a pending cancel ended the job).
        if item.circuit is not None and item.outcome in (
            Outcome.COMPLETE,
            Outcome.RETRY,
            Outcome.FAIL,
        ):
            success = item.outcome is Outcome.COMPLETE
            change = _count_run(store, row.task, item.circuit, success, now)
            if change is not None:
                out.circuit_changes.append(change)
    store.notify(woken, timer=timer)
    return out


def save_progress(store: Store, items: Sequence[tuple[str, str, bytes]]) -> set[str]:
    refused: set[str] = set()
    for job_id, token, progress in items:
        row = _held(store, job_id, token)
        if row is None:
            refused.add(job_id)
        else:
            row.progress = bytes(progress)
    return refused


def cancel_requests(store: Store, job_ids: Sequence[str]) -> set[str]:
    out: set[str] = set()
    for job_id in job_ids:
        row = store.jobs.get(job_id)
        if row is not None and row.state is JobState.ACTIVE and row.cancel_requested:
            out.add(job_id)
    return out

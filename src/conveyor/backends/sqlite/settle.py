"""settle_jobs, renew_leases, save_progress and cancel_requests: each a
synchronous transaction in a connection's thread (see enqueue.py).

Outcomes and renewals are fenced by lease token; settling also counts the
outcomes in their tasks' circuits, and resolves the blocked jobs waiting for
the jobs it finishes (see dependencies.py).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from conveyor.backends.base import (
    CircuitInfo,
    CircuitState,
    Outcome,
    RenewResult,
    Settlement,
    SettleResult,
)
from conveyor.backends.sqlite.decode import Row
from conveyor.backends.sqlite.dependencies import Finished, resolve_dependents
from conveyor.backends.sqlite.queries import INLINE_MAX, Q, json_param
from conveyor.job import FailureReason
from conveyor.serialization import dumps_str

_CLOSED = CircuitState.CLOSED.value
_OPEN = CircuitState.OPEN.value
_HALF_OPEN = CircuitState.HALF_OPEN.value


def _leases(conn: sqlite3.Connection, ids: list[str]) -> dict[str, Row]:
    """id -> (id, lease_token, cancel_requested, queue, has_dependents) of the
    active ones."""
    return {r[0]: r for r in conn.execute(Q.leases_of, {"ids": json_param(ids)}).fetchall()}


def renew(conn: sqlite3.Connection, leases: Sequence[tuple[str, str]], lease: float) -> RenewResult:
    now = time.time()
    current = _leases(conn, [job_id for job_id, _ in leases])
    result = RenewResult()
    params: list[tuple[Any, ...]] = []
    for job_id, token in leases:
        row = current.get(job_id)
        if row is None or row[1] != token:
            result.lost.add(job_id)
            continue
        result.renewed.add(job_id)
        if row[2]:
            result.cancel_requested.add(job_id)
        params.append((now + lease, job_id, token))
    if params:
        conn.executemany(Q.renew_lease, params)
    return result


def save_progress(conn: sqlite3.Connection, items: Sequence[tuple[str, str, bytes]]) -> set[str]:
    current = _leases(conn, [job_id for job_id, _, _ in items])
    refused: set[str] = set()
    params: list[tuple[Any, ...]] = []
    for job_id, token, progress in items:
        row = current.get(job_id)
        if row is None or row[1] != token:
            refused.add(job_id)
            continue
        params.append((progress, job_id, token))
    if params:
        conn.executemany(Q.save_progress, params)
    return refused


# (refused, cancelled, wake, counted): what applying a batch of settlements found.
_Applied = tuple[set[str], set[str], set[str], list[Settlement]]


def settle(
    conn: sqlite3.Connection, settlements: Sequence[Settlement]
) -> tuple[SettleResult, set[str]]:
    """Apply outcomes fenced by lease token; returns the result and the queues
    that got a job back (released or retried, or a dependent released) to wake
    waiters on.

    COMPLETE outcomes (nearly all of them) take one statement for the batch;
    anything else, a repeated id, a refusal, or a job that blocked jobs wait
    for takes the exact path, which reads each lease first. A RETRY or RELEASE
    of a job with a pending cancel request ends it cancelled instead:
    ``leases_of`` reads the flag in this transaction.
    """
    now = time.time()
    applied = _settle_fast(conn, settlements, now)
    if applied is None:
        applied = _settle_exact(conn, settlements, now)
    refused, cancelled, wake, counted = applied
    changes = _count_in_circuits(conn, counted, now) if counted else []
    return SettleResult(refused=refused, circuit_changes=changes, cancelled=cancelled), wake


def _settle_fast(
    conn: sqlite3.Connection, settlements: Sequence[Settlement], now: float
) -> _Applied | None:
    """Every COMPLETE of the batch in one UPDATE, checked by its change count;
    ``None`` (nothing changed) when the exact path must decide."""
    items: list[list[str | None]] = []
    rest: list[Settlement] = []
    for s in settlements:
        if s.outcome is not Outcome.COMPLETE:
            rest.append(s)
            continue
        result, progress = s.result, s.progress
        if (result is not None and len(result) > INLINE_MAX) or (
            progress is not None and len(progress) > INLINE_MAX
        ):
            return None
        try:
            items.append(
                [
                    s.job_id,
                    s.lease_token,
                    None if result is None else result.decode(),
                    None if progress is None else progress.decode(),
                ]
            )
        except UnicodeDecodeError:
            return None
    if not items or len({s.job_id for s in settlements}) != len(settlements):
        return None  # a repeated id: only the exact path knows which one wins
    conn.execute("SAVEPOINT settle")
    changed = conn.execute(Q.complete_jobs, {"items": json_param(items), "now": now}).rowcount
    if changed != len(items):  # some were refused: find out which, exactly
        conn.execute("ROLLBACK TO settle")
        conn.execute("RELEASE settle")
        return None
    conn.execute("RELEASE settle")
    if not rest:
        return set(), set(), set(), [s for s in settlements if s.circuit is not None]
    refused, cancelled, wake, _ = _settle_exact(conn, rest, now)
    counted = [
        s
        for s in settlements
        if s.circuit is not None and (s.outcome is Outcome.COMPLETE or s.job_id not in refused)
    ]
    return refused, cancelled, wake, counted


def _settle_exact(
    conn: sqlite3.Connection, settlements: Sequence[Settlement], now: float
) -> _Applied:
    """Read each job's lease, then apply the outcomes that hold it
    (``executemany``); then resolve the dependents of the jobs that ended."""
    current = _leases(conn, [s.job_id for s in settlements])
    refused: set[str] = set()
    cancelled: set[str] = set()
    wake: set[str] = set()
    params: list[tuple[Any, ...]] = []
    counted: list[Settlement] = []
    finished: list[Finished] = []  # ended, with blocked jobs waiting for them
    for s in settlements:
        row = current.get(s.job_id)
        if row is None or row[1] != s.lease_token:
            refused.add(s.job_id)
            continue
        del current[s.job_id]  # settled once: a second settlement in the batch is refused
        outcome = s.outcome
        if outcome is Outcome.RELEASE or outcome is Outcome.RETRY:
            if row[2]:  # a pending cancel wins over waiting again
                outcome = Outcome.CANCEL
                cancelled.add(s.job_id)
            else:
                wake.add(row[3])
        params.append(_settle_params(s, outcome, now))
        if row[4] and outcome is not Outcome.RELEASE and outcome is not Outcome.RETRY:
            finished.append((s.job_id, outcome is not Outcome.COMPLETE))
        if s.circuit is not None:
            counted.append(s)  # counted as reported, even when a cancel ended the job
    if params:
        conn.executemany(Q.settle_job, params)
    if finished:
        wake |= resolve_dependents(conn, finished, now)
    return refused, cancelled, wake, counted


def _settle_params(s: Settlement, outcome: Outcome, now: float) -> tuple[Any, ...]:
    """The 12 parameters of ``settle_job`` for one settlement ending in ``outcome``."""
    error: str | None = None
    if s.error is not None and outcome is not Outcome.COMPLETE:
        info = s.error.to_dict()
        if not info["at"]:
            info["at"] = now
        error = dumps_str(info)
    tail = (s.progress, s.job_id, s.lease_token)
    if outcome is Outcome.COMPLETE:
        return ("completed", s.result, None, None, None, 0, now, 0, *tail, None)
    if outcome is Outcome.RETRY:
        run_at = now + s.retry_delay  # the next wait starts when the backoff ends
        return ("delayed", None, None, error, run_at, 0, None, 1, *tail, run_at)
    if outcome is Outcome.FAIL:
        reason = (s.failure_reason or FailureReason.ERROR).value
        return ("failed", None, reason, error, None, 0, now, 0, *tail, None)
    if outcome is Outcome.CANCEL:
        return ("cancelled", None, None, error, None, 0, now, 0, *tail, None)
    if outcome is Outcome.RELEASE:
        if s.retry_delay > 0:  # given back for later: delayed, like a retry
            run_at = now + s.retry_delay
            return ("delayed", None, None, error, run_at, 1, None, 1, *tail, run_at)
        return ("waiting", None, None, error, None, 1, None, 1, *tail, now)
    raise ValueError(f"unknown outcome {outcome!r}")


def _count_in_circuits(
    conn: sqlite3.Connection, counted: list[Settlement], now: float
) -> list[CircuitInfo]:
    """Count successes and failures in their tasks' circuits, in batch order."""
    tasks = list(dict.fromkeys([s.task for s in counted]))
    # task -> [state, failures, open_for, open_until]; no row = closed, 0 failures
    circuits: dict[str, list[Any]] = {
        task: [state, failures, open_for, open_until]
        for task, state, failures, open_for, open_until in conn.execute(
            Q.circuits_of, {"tasks": json_param(tasks)}
        ).fetchall()
    }
    if all(c[0] == _CLOSED and not c[1] for c in circuits.values()) and all(
        s.outcome is Outcome.COMPLETE for s in counted
    ):
        return []  # successes on closed circuits without failures change nothing
    dirty: set[str] = set()
    changes: list[CircuitInfo] = []
    for s in counted:
        policy = s.circuit
        assert policy is not None
        c = circuits.setdefault(s.task, [_CLOSED, 0, None, None])
        if s.outcome is Outcome.COMPLETE:
            if c[0] != _CLOSED:
                c[0], c[1], c[3] = _CLOSED, 0, None
                changes.append(CircuitInfo(s.task, CircuitState.CLOSED, 0, None))
                dirty.add(s.task)
            elif c[1]:
                c[1] = 0
                dirty.add(s.task)
        elif s.outcome is Outcome.RETRY or s.outcome is Outcome.FAIL:
            c[1] += 1
            c[2] = policy.open_for
            dirty.add(s.task)
            opens = c[0] == _HALF_OPEN or (
                c[0] == _CLOSED and policy.threshold > 0 and c[1] >= policy.threshold
            )
            if opens:
                c[0], c[3] = _OPEN, now + policy.open_for
                changes.append(CircuitInfo(s.task, CircuitState.OPEN, c[1], c[3]))
    if dirty:
        conn.executemany(Q.upsert_circuit, [(task, *circuits[task]) for task in sorted(dirty)])
    return changes


def cancel_requests(conn: sqlite3.Connection, job_ids: Sequence[str]) -> set[str]:
    rows = conn.execute(Q.cancel_requested_of, {"ids": dumps_str(list(job_ids))}).fetchall()
    return {r[0] for r in rows}

"""settle_jobs (one call of the schema's ``settle`` function, or one
``complete`` statement for a batch of successes), renew_leases, save_progress
and cancel_requests: one statement each, fenced by lease token."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor import serialization
from conveyor.backends.base import (
    CircuitInfo,
    CircuitState,
    ClaimRequest,
    ClaimResult,
    Outcome,
    RenewResult,
    Settlement,
    SettleResult,
)
from conveyor.backends.postgres.claim import claim_args, claim_result
from conveyor.backends.postgres.connection import Pool
from conveyor.backends.postgres.queries import Queries

CIRCUIT_STATES = {s.value: s for s in CircuitState}


async def renew_leases(
    pool: Pool, q: Queries, leases: Sequence[tuple[str, str]], lease: float
) -> RenewResult:
    rows = await pool.fetch(
        "renew",
        q.renew,
        [job_id for job_id, _ in leases],
        [token for _, token in leases],
        lease,
    )
    result = RenewResult()
    for job_id, cancel in rows:
        result.renewed.add(job_id)
        if cancel:
            result.cancel_requested.add(job_id)
    result.lost = {job_id for job_id, _ in leases} - result.renewed
    return result


def _rounds(settlements: Sequence[Settlement]) -> list[list[Settlement]]:
    """``settlements`` in batch order, split so that no round names a job twice.

    One statement cannot update a row twice, yet a job may be settled twice in
    one batch: a worker holding a stale outcome (a claim the store lost in a
    crash, or recovered) and the reclaim's current one. Each is judged by its
    own token, one round per repeat, so the current one is stored whichever
    comes first; the stale one is refused."""
    rounds: list[list[Settlement]] = []
    seen: dict[str, int] = {}
    for s in settlements:
        n = seen.get(s.job_id, 0)
        seen[s.job_id] = n + 1
        if n == len(rounds):
            rounds.append([])
        rounds[n].append(s)
    return rounds


def _complete_args(batch: Sequence[Settlement]) -> tuple[Any, ...]:
    return (
        [s.job_id for s in batch],
        [s.lease_token for s in batch],
        [s.result for s in batch],
        [s.progress for s in batch],
        sorted({s.task for s in batch if s.circuit is not None}),
    )


def _settle_args(batch: Sequence[Settlement]) -> tuple[Any, ...]:
    counted = any(s.circuit is not None for s in batch)
    return (
        [s.job_id for s in batch],
        [s.lease_token for s in batch],
        [s.outcome.value for s in batch],
        [s.result for s in batch],
        [s.failure_reason.value if s.failure_reason else None for s in batch],
        [_error_json(s) for s in batch],
        [float(s.retry_delay) for s in batch],
        [s.progress for s in batch],
        [s.task for s in batch] if counted else None,
        [s.circuit.threshold if s.circuit else None for s in batch] if counted else None,
        [s.circuit.open_for if s.circuit else None for s in batch] if counted else None,
    )


def _read_settle_row(
    result: SettleResult,
    wake: set[str],
    kind: str,
    name: str,
    state: str | None,
    failures: int | None,
    open_until: float | None,
) -> None:
    if kind == "refused":
        result.refused.add(name)
    elif kind == "cancelled":
        result.cancelled.add(name)
    elif kind == "wake":  # a queue that got a job back, or a dependent released
        wake.add(name)
    elif kind == "circuit":
        result.circuit_changes.append(
            CircuitInfo(name, CIRCUIT_STATES[state or "closed"], failures or 0, open_until)
        )


async def settle_jobs(
    pool: Pool, q: Queries, settlements: Sequence[Settlement]
) -> tuple[SettleResult, set[str]]:
    """The result, and the queues that got a job back (to wake their waiters)."""
    result = SettleResult()
    wake: set[str] = set()
    for batch in _rounds(settlements):
        await _settle_round(pool, q, batch, result, wake)
    return result, wake


async def _settle_round(
    pool: Pool, q: Queries, batch: list[Settlement], result: SettleResult, wake: set[str]
) -> None:
    if all(s.outcome is Outcome.COMPLETE for s in batch):
        rows = await pool.fetch("settle", q.complete, *_complete_args(batch))
        for kind, name in rows:
            if kind == "refused":
                result.refused.add(name)
            elif kind == "wake":  # a dependent released by a completion
                wake.add(name)
            else:
                result.circuit_changes.append(CircuitInfo(name, CircuitState.CLOSED, 0, None))
        return
    rows = await pool.fetch("settle", q.settle, *_settle_args(batch))
    for kind, name, state, failures, open_until in rows:
        _read_settle_row(result, wake, kind, name, state, failures, open_until)


async def settle_and_claim(
    pool: Pool, q: Queries, settlements: Sequence[Settlement], request: ClaimRequest
) -> tuple[SettleResult, ClaimResult, set[str]]:
    """settle_jobs then claim_jobs in one statement (``complete_claim`` or
    ``settle_claim``): one round trip, one transaction. A batch naming a job
    twice (rare: see :func:`_rounds`) settles its earlier rounds first."""
    result = SettleResult()
    wake: set[str] = set()
    *earlier, batch = _rounds(settlements) or [[]]
    for round_ in earlier:
        await _settle_round(pool, q, round_, result, wake)
    if all(s.outcome is Outcome.COMPLETE for s in batch):
        rows = await pool.fetch(
            "settle and claim", q.complete_claim, *_complete_args(batch), *claim_args(request)
        )
    else:
        rows = await pool.fetch(
            "settle and claim", q.settle_claim, *_settle_args(batch), *claim_args(request)
        )
    jobs = []
    for kind, name, state, failures, open_until, job in rows:
        if job is not None:
            jobs.append(job)
        else:
            _read_settle_row(result, wake, kind, name, state, failures, open_until)
    return result, claim_result(jobs), wake


def _error_json(s: Settlement) -> str | None:
    if s.error is None or s.outcome is Outcome.COMPLETE:
        return None
    return serialization.dumps_str(s.error.to_dict())


async def save_progress(
    pool: Pool, q: Queries, items: Sequence[tuple[str, str, bytes]]
) -> set[str]:
    rows = await pool.fetch(
        "save progress",
        q.save_progress,
        [i[0] for i in items],
        [i[1] for i in items],
        [i[2] for i in items],
    )
    return {i[0] for i in items} - {row[0] for row in rows}


async def cancel_requests(pool: Pool, q: Queries, job_ids: Sequence[str]) -> set[str]:
    rows = await pool.fetch("cancel requests", q.cancel_requested_of, list(job_ids))
    return {r[0] for r in rows}

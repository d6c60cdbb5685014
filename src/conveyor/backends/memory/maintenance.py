"""Maintenance in memory: recovering stalled jobs and pruning finished ones
(with expired idempotency keys and idle rate logs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor.backends.base import PruneRule, StallResult
from conveyor.backends.memory.store import RateLog, Row, Store, deadline, to_job
from conveyor.backends.workflow_retention import (
    Threshold,
    WorkflowRow,
    covers,
    due_workflows,
    threshold_of,
)
from conveyor.job import TERMINAL_STATES, ErrorInfo, FailureReason, JobState


def recover_stalled(store: Store, max_stalled: int) -> StallResult:
    now = store.now()
    out = StallResult()
    stalled = [
        row
        for row in (store.jobs[i] for i in store.by_state[JobState.ACTIVE])
        if row.lease_until is not None and row.lease_until < now
    ]
    stalled.sort(key=lambda r: (r.lease_until or 0.0, r.id))
    woken: set[str] = set()
    for row in stalled:
        row.errors += (
            ErrorInfo(
                type="Stalled",
                message="the job's lease expired: its worker died or stopped renewing",
                attempt=row.attempts,
                reason=FailureReason.STALLED.value,
                at=now,
            ),
        )
        row.lease_until = None
        row.lease_token = None
        row.stalls += 1
        if row.cancel_requested:  # a pending cancel wins: never run again
            row.finished_at = now
            store.move(row, JobState.CANCELLED)
            out.cancelled.append(to_job(row))
        elif row.attempts >= row.max_attempts or row.stalls > max_stalled:
            row.failure_reason = FailureReason.STALLED
            row.finished_at = now
            store.move(row, JobState.FAILED)
            out.failed.append(to_job(row))
        else:
            row.worker_id = None
            row.expires_at = deadline(now, row.ttl)
            store.move(row, JobState.WAITING)
            woken.add(row.queue)
            out.requeued.append(to_job(row))
    store.notify(woken)
    return out


def prune_jobs(store: Store, rules: Sequence[PruneRule]) -> int:
    now = store.now()
    deleted = 0
    for rule in rules:
        if rule.state not in TERMINAL_STATES:
            continue
        excluded = set(rule.exclude_tasks)
        rows = [
            row
            for row in (store.jobs[i] for i in store.by_state[rule.state])
            if (row.task == rule.task if rule.task is not None else row.task not in excluded)
        ]
        doomed: dict[str, Row] = {}
        if rule.max_age is not None:
            cutoff = now - rule.max_age
            for row in rows:
                finished = row.finished_at if row.finished_at is not None else row.created_at
                if finished < cutoff:
                    doomed[row.id] = row
        if rule.max_count is not None and len(rows) > rule.max_count:
            rows.sort(
                key=lambda r: (
                    r.finished_at if r.finished_at is not None else r.created_at,
                    r.id,
                ),
                reverse=True,
            )
            for row in rows[max(0, rule.max_count) :]:
                doomed[row.id] = row
        for row in doomed.values():
            if row.workflow_id is None:  # a workflow's jobs go together, below
                store.remove(row)
                deleted += 1
    deleted += _prune_workflows(store, rules, now)
    for name in [k for k, key in store.keys.items() if key.expires_at <= now]:
        del store.keys[name]
    _trim_rate_logs(store.rates, now)
    _trim_rate_logs(store.key_rates, now)
    return deleted


def _trim_rate_logs(logs: dict[Any, RateLog], now: float) -> None:
    """Forget the starts that left their windows, and the empty windows."""
    for name in list(logs):
        log = logs[name]
        log.trim(now, log.period)
        if not log.starts:
            del logs[name]


def _finished_order(row: Row) -> tuple[float, str]:
    return (row.finished_at if row.finished_at is not None else row.created_at, row.id)


def _prune_workflows(store: Store, rules: Sequence[PruneRule], now: float) -> int:
    """Delete each workflow whose jobs are all terminal and due, all together."""
    thresholds: list[Threshold | None] = []
    for rule in rules:
        newest_kept = None
        if rule.max_count is not None and rule.max_count > 0:
            scope = sorted(
                (
                    _finished_order(row)
                    for row in (store.jobs[i] for i in store.by_state[rule.state])
                    if covers(rule, row.state, row.task)
                ),
                reverse=True,
            )
            newest_kept = scope[rule.max_count - 1] if len(scope) >= rule.max_count else None
        thresholds.append(threshold_of(rule, newest_kept))
    members: dict[str, list[Row]] = {}
    for row in store.jobs.values():
        if row.workflow_id is not None:
            members.setdefault(row.workflow_id, []).append(row)
    rows = (
        WorkflowRow(row.workflow_id, row.id, row.state, row.task, _finished_order(row)[0])
        for jobs in members.values()
        for row in jobs
        if row.workflow_id is not None
    )
    deleted = 0
    for workflow_id in due_workflows(rows, rules, now, thresholds):
        for row in members[workflow_id]:
            store.remove(row)
            deleted += 1
    return deleted

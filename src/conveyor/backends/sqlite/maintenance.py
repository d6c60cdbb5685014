"""Maintenance as synchronous transactions in the writer's thread (see
enqueue.py): stalled-job recovery and retention, in chunks of CHUNK rows.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from conveyor.backends.base import PruneRule, StallResult
from conveyor.backends.sqlite.admin import CHUNK, remember_final_states
from conveyor.backends.sqlite.connection import ThreadConnection
from conveyor.backends.sqlite.decode import Row, job_from_row
from conveyor.backends.sqlite.dependencies import finished_with_dependents, resolve_dependents
from conveyor.backends.sqlite.queries import Q
from conveyor.backends.workflow_retention import (
    WORKFLOW_CHUNK,
    Threshold,
    WorkflowRow,
    due_workflows,
    threshold_of,
)
from conveyor.job import TERMINAL_STATES, JobState
from conveyor.serialization import dumps_str


def recover_stalled(conn: sqlite3.Connection, max_stalled: int) -> tuple[StallResult, set[str]]:
    """The recovered jobs, and the queues that got a job back to wake: the
    requeued ones' and those of the dependents released by jobs that ended."""
    now = time.time()
    rows = conn.execute(Q.recover_stalled, {"now": now, "max_stalled": max_stalled}).fetchall()
    result = StallResult()
    for row in rows:
        job = job_from_row(row)  # listed by the state it ended in
        if job.state is JobState.WAITING:
            result.requeued.append(job)
        elif job.state is JobState.CANCELLED:
            result.cancelled.append(job)
        else:
            result.failed.append(job)
    wake = {job.queue for job in result.requeued}
    finished = finished_with_dependents(rows)
    if finished:
        wake |= resolve_dependents(conn, finished, now)
    return result, wake


def _filters(rule: PruneRule) -> dict[str, Any]:
    return {
        "state": rule.state.value,
        "task": rule.task,
        "exclude": dumps_str(list(rule.exclude_tasks)),
    }


def prune_chunk(conn: sqlite3.Connection, rule: PruneRule) -> int:
    """Delete up to CHUNK jobs for one rule (age first, then count)."""
    if rule.state not in TERMINAL_STATES:
        return 0  # retention never touches live jobs
    params: dict[str, Any] = {**_filters(rule), "chunk": CHUNK}
    deleted: list[Row] = []
    if rule.max_age is not None:
        params["before"] = time.time() - rule.max_age
        deleted = conn.execute(Q.prune_by_age, params).fetchall()
    if not deleted and rule.max_count is not None:
        params["keep"] = max(0, rule.max_count)
        deleted = conn.execute(Q.prune_by_count, params).fetchall()
    remember_final_states(conn, deleted)
    return len(deleted)


def prune_history(conn: sqlite3.Connection) -> None:
    """Drop expired idempotency keys and rate-limit starts out of every window."""
    now = time.time()
    conn.execute(Q.prune_keys, {"now": now})
    conn.execute(Q.prune_rate_starts, {"now": now})
    conn.execute(Q.prune_rate_key_starts, {"now": now})


def finished_workflows(conn: sqlite3.Connection) -> list[str]:
    return [row[0] for row in conn.execute(Q.finished_workflows)]


def prune_workflows(
    conn: sqlite3.Connection, rules: Sequence[PruneRule], workflow_ids: list[str]
) -> int:
    """Delete, all together, the jobs of each of ``workflow_ids`` that is (still)
    finished and due; one transaction, so no retry slips in between."""
    now = time.time()
    thresholds: list[Threshold | None] = []
    for rule in rules:
        newest_kept = None
        if rule.max_count is not None and rule.max_count > 0:
            params = {**_filters(rule), "keep": rule.max_count}
            found = conn.execute(Q.count_threshold, params).fetchone()
            newest_kept = (found[0], found[1]) if found is not None else None
        thresholds.append(threshold_of(rule, newest_kept))
    ids = dumps_str(workflow_ids)
    rows = (
        WorkflowRow(wf, job_id, JobState(state), task, finished)
        for wf, job_id, state, task, finished in conn.execute(Q.workflow_rows, {"ids": ids})
    )
    due = due_workflows(rows, rules, now, thresholds)
    if not due:
        return 0
    deleted = conn.execute(Q.delete_workflows, {"ids": dumps_str(sorted(due))}).fetchall()
    remember_final_states(conn, deleted)
    return len(deleted)


async def prune_jobs(
    writer: ThreadConnection, reader: ThreadConnection, rules: Sequence[PruneRule]
) -> int:
    total = 0
    for rule in rules:
        while True:  # chunked, until the rule has nothing left to delete
            deleted = await writer.write(prune_chunk, rule)
            total += deleted
            if not deleted:
                break
    if any(rule.max_age is not None or rule.max_count is not None for rule in rules):
        # Found on the reader (a scan); each chunk decided again under the write lock.
        workflow_ids = await reader.read(finished_workflows)
        for i in range(0, len(workflow_ids), WORKFLOW_CHUNK):
            chunk = workflow_ids[i : i + WORKFLOW_CHUNK]
            total += await writer.write(prune_workflows, rules, chunk)
    await writer.write(prune_history)
    return total

"""Reads on the reader connection (WAL: never queued behind writes): jobs by
id, listings and counts, queue counts and the queues themselves.

Each function runs in the reader's thread, inside one snapshot when the
backend asks for one (see connection.py).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping, Sequence
from typing import Any

from conveyor.backends.base import JobFilter, KeyCount, QueueInfo, RateKeyUse, TenantCount
from conveyor.backends.sqlite.decode import job_from_row
from conveyor.backends.sqlite.queries import Q, json_param
from conveyor.job import Job, JobState
from conveyor.ratelimit import RateLimit
from conveyor.serialization import dumps_str, loads

_RARE_FINISHED = frozenset({JobState.FAILED, JobState.CANCELLED})


def _states_json(states: Sequence[JobState]) -> str:
    return dumps_str([JobState(s).value for s in states])


def filter_params(where: JobFilter) -> dict[str, Any]:
    """The parameters of the JobFilter blocks; ``None`` matches everything."""
    return {
        "states": None if where.states is None else _states_json(where.states),
        "queue": where.queue,
        "task": where.task,
        "tenant": where.tenant,
        "failure_reason": None if where.failure_reason is None else where.failure_reason.value,
        "idempotency_key": where.idempotency_key,
        "finished_before": where.finished_before,
        "workflow_id": where.workflow_id,
    }


def get_jobs(conn: sqlite3.Connection, job_ids: Sequence[str]) -> list[Job]:
    rows = conn.execute(Q.jobs_by_ids, {"ids": dumps_str(list(job_ids))}).fetchall()
    return [job_from_row(r) for r in rows]


def _rare_finished(where: JobFilter) -> bool:
    """Only failed/cancelled jobs: few, so read them through jobs_finished."""
    return bool(where.states) and all(JobState(s) in _RARE_FINISHED for s in where.states or ())


def list_jobs(conn: sqlite3.Connection, where: JobFilter, limit: int, offset: int) -> list[Job]:
    params = filter_params(where)
    params["limit"] = limit
    params["offset"] = offset
    if where.workflow_id is not None:
        query = Q.list_workflow_jobs
    elif _rare_finished(where):
        query = Q.list_rare_finished
    else:
        query = Q.list_jobs
    return [job_from_row(r) for r in conn.execute(query, params).fetchall()]


def count_jobs(conn: sqlite3.Connection, where: JobFilter) -> int:
    if where.only_states():  # index-only, one partial index per state
        assert where.states is not None
        total = 0
        for state in {JobState(s) for s in where.states}:
            if state is JobState.WAITING:
                row = conn.execute(Q.count_waiting).fetchone()
            elif state is JobState.DELAYED:
                row = conn.execute(Q.count_delayed).fetchone()
            elif state is JobState.ACTIVE:
                row = conn.execute(Q.count_active).fetchone()
            elif state is JobState.BLOCKED:
                row = conn.execute(Q.count_blocked).fetchone()
            else:
                row = conn.execute(Q.count_finished, {"state": state.value}).fetchone()
            total += int(row[0])
        return total
    if where.workflow_id is not None:
        query = Q.count_workflow_jobs
    elif _rare_finished(where):
        query = Q.count_rare_finished
    else:
        query = Q.count_jobs
    return int(conn.execute(query, filter_params(where)).fetchone()[0])


def queue_counts(conn: sqlite3.Connection) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}

    def zeros() -> dict[str, int]:
        return {s.value: 0 for s in JobState}

    for name, *_ in conn.execute(Q.queue_rows):
        counts[name] = zeros()
    for queue, state, n in conn.execute(Q.counts_by_queue):
        counts.setdefault(queue, zeros())[state] = n
    return dict(sorted(counts.items()))


def oldest_waiting(conn: sqlite3.Connection) -> dict[str, float]:
    rows = conn.execute(Q.oldest_waiting, {"now": time.time()}).fetchall()
    return {queue: run_at for queue, run_at in rows}


def list_queues(conn: sqlite3.Connection) -> list[QueueInfo]:
    queues = {
        name: QueueInfo(
            name=name,
            paused=bool(paused),
            max_size=max_size,
            ttl=ttl,
            fairness=fairness,
            weights=weights_of(weights),
        )
        for name, paused, max_size, ttl, fairness, weights in conn.execute(Q.queue_rows)
    }
    for queue, _, _ in conn.execute(Q.counts_by_queue):
        if queue not in queues:
            queues[queue] = QueueInfo(name=queue)
    return sorted(queues.values(), key=lambda q: q.name)


def weights_of(stored: str | None) -> dict[str, float]:
    """A queue's weights column (a JSON object, or NULL for none)."""
    return {} if stored is None else {str(t): float(w) for t, w in loads(stored).items()}


def tenant_counts(conn: sqlite3.Connection, queue: str, limit: int) -> list[TenantCount]:
    rows = conn.execute(Q.tenant_counts, {"queue": queue, "limit": max(0, limit)})
    return [TenantCount(tenant, waiting, active) for tenant, waiting, active in rows]


def ping(conn: sqlite3.Connection) -> None:
    conn.execute(Q.ping).fetchone()


def key_counts(conn: sqlite3.Connection, tasks: Sequence[str], limit: int) -> list[KeyCount]:
    asked = set(tasks)
    rows = conn.execute(Q.key_counts, {"tasks": json_param(list(asked)), "limit": max(0, limit)})
    return [
        KeyCount(task, key, int(active), int(waiting) if task in asked else None)
        for task, key, active, waiting in rows
    ]


def rate_key_usage(
    conn: sqlite3.Connection, rates: Mapping[str, RateLimit], limit: int
) -> list[RateKeyUse]:
    # The claim's clock (claim.py stamps starts with time.time()).
    pairs = json_param([[task, rate.period] for task, rate in rates.items()])
    params = {"rates": pairs, "now": time.time(), "limit": max(0, limit)}
    return [
        RateKeyUse(task, key, int(used))
        for task, key, used in conn.execute(Q.rate_key_usage, params)
    ]

"""Everything off the hot path, as synchronous transactions: reads, cancel,
dead-letter retry, deletes, maintenance, queues, circuits and heartbeats.

Like ops.py, each function is the whole body of one transaction, run in a
connection's own thread; reads run on the reader connection.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from conveyor.backends.base import (
    CircuitInfo,
    CircuitState,
    JobFilter,
    PruneRule,
    QueueInfo,
    StallResult,
    WorkerInfo,
    earlier_retry,
)
from conveyor.backends.rows import worker_blob, worker_from_blob
from conveyor.backends.sqlite.decode import Row, job_from_row
from conveyor.backends.sqlite.queries import Q
from conveyor.errors import InvalidStateError, JobNotFound
from conveyor.job import TERMINAL_STATES, Job, JobState
from conveyor.serialization import dumps_str

#: Rows deleted per transaction by purges and retention, so a big cleanup never
#: holds the write lock for long (the caller loops until a chunk comes back short).
CHUNK = 5000

_CIRCUIT_STATES = {s.value: s for s in CircuitState}
_RARE_FINISHED = frozenset({JobState.FAILED, JobState.CANCELLED})


def _states_json(states: Sequence[JobState]) -> str:
    return dumps_str([JobState(s).value for s in states])


def _filter(where: JobFilter) -> dict[str, Any]:
    """The parameters of the JobFilter blocks; ``None`` matches everything."""
    return {
        "states": None if where.states is None else _states_json(where.states),
        "queue": where.queue,
        "task": where.task,
        "tenant": where.tenant,
        "failure_reason": None if where.failure_reason is None else where.failure_reason.value,
        "idempotency_key": where.idempotency_key,
        "finished_before": where.finished_before,
    }


# -- reads ---------------------------------------------------------------------


def get_jobs(conn: sqlite3.Connection, job_ids: Sequence[str]) -> list[Job]:
    rows = conn.execute(Q.jobs_by_ids, {"ids": dumps_str(list(job_ids))}).fetchall()
    return [job_from_row(r) for r in rows]


def _rare_finished(where: JobFilter) -> bool:
    """Only failed/cancelled jobs: few, so read them through jobs_finished."""
    return bool(where.states) and all(JobState(s) in _RARE_FINISHED for s in where.states or ())


def list_jobs(conn: sqlite3.Connection, where: JobFilter, limit: int, offset: int) -> list[Job]:
    params = _filter(where)
    params["limit"] = limit
    params["offset"] = offset
    query = Q.list_rare_finished if _rare_finished(where) else Q.list_jobs
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
            else:
                row = conn.execute(Q.count_finished, {"state": state.value}).fetchone()
            total += int(row[0])
        return total
    query = Q.count_rare_finished if _rare_finished(where) else Q.count_jobs
    return int(conn.execute(query, _filter(where)).fetchone()[0])


def cancel_requests(conn: sqlite3.Connection, job_ids: Sequence[str]) -> set[str]:
    rows = conn.execute(Q.cancel_requested_of, {"ids": dumps_str(list(job_ids))}).fetchall()
    return {r[0] for r in rows}


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
        name: QueueInfo(name=name, paused=bool(paused), max_size=max_size, ttl=ttl)
        for name, paused, max_size, ttl in conn.execute(Q.queue_rows)
    }
    for queue, _, _ in conn.execute(Q.counts_by_queue):
        if queue not in queues:
            queues[queue] = QueueInfo(name=queue)
    return sorted(queues.values(), key=lambda q: q.name)


def list_circuits(conn: sqlite3.Connection) -> list[CircuitInfo]:
    return [
        CircuitInfo(task, _CIRCUIT_STATES.get(state, CircuitState.OPEN), failures, open_until)
        for task, state, failures, open_until in conn.execute(Q.list_circuits)
    ]


def list_workers(conn: sqlite3.Connection) -> list[WorkerInfo]:
    return [
        worker_from_blob(worker_id, info, last_seen, heartbeat_interval)
        for worker_id, info, last_seen, heartbeat_interval in conn.execute(Q.list_workers)
    ]


def next_due(conn: sqlite3.Connection, queues: list[str]) -> float | None:
    row = conn.execute(Q.next_due, {"queues": dumps_str(queues)}).fetchone()
    return None if row is None else float(row[0])


def data_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute(Q.data_version).fetchone()[0])


def ping(conn: sqlite3.Connection) -> None:
    conn.execute(Q.ping).fetchone()


# -- acting on jobs ------------------------------------------------------------


def cancel_job(conn: sqlite3.Connection, job_id: str) -> Job | None:
    row = conn.execute(Q.cancel_job, {"id": job_id, "now": time.time()}).fetchone()
    if row is not None:
        return job_from_row(row)
    jobs = get_jobs(conn, [job_id])  # terminal (unchanged) or missing
    return jobs[0] if jobs else None


def retry_failed(conn: sqlite3.Connection, job_id: str, new_id: str) -> Job:
    row = conn.execute(Q.retry_target, {"id": job_id}).fetchone()
    if row is None:
        raise JobNotFound(job_id)
    state, retried_as = row
    if state != JobState.FAILED.value:
        raise InvalidStateError(f"job {job_id} is {state}: only failed jobs can be retried")
    if retried_as is not None:
        return earlier_retry(job_id, retried_as, get_jobs(conn, [retried_as]))
    params = {"id": job_id, "new_id": new_id, "now": time.time()}
    conn.execute(Q.insert_retry_copy, params)
    conn.execute(Q.mark_retried, params)
    return get_jobs(conn, [new_id])[0]


def _remember_keys(conn: sqlite3.Connection, deleted: list[Row]) -> None:
    """Deleted rows are (idempotency_key, id, state): keys keep the final state."""
    keyed = [(state, key, job_id) for key, job_id, state in deleted if key is not None]
    if keyed:
        conn.executemany(Q.remember_final_state, keyed)


def delete_jobs(conn: sqlite3.Connection, job_ids: Sequence[str]) -> int:
    deleted = conn.execute(Q.delete_jobs, {"ids": dumps_str(list(job_ids))}).fetchall()
    _remember_keys(conn, deleted)
    return len(deleted)


def purge_chunk(conn: sqlite3.Connection, where: JobFilter) -> int:
    params = _filter(where)
    params["chunk"] = CHUNK
    deleted = conn.execute(Q.purge_jobs, params).fetchall()
    _remember_keys(conn, deleted)
    return len(deleted)


# -- maintenance ---------------------------------------------------------------


def recover_stalled(conn: sqlite3.Connection, max_stalled: int) -> StallResult:
    params = {"now": time.time(), "max_stalled": max_stalled}
    result = StallResult()
    for row in conn.execute(Q.recover_stalled, params).fetchall():
        job = job_from_row(row)
        if job.state is JobState.WAITING:
            result.requeued.append(job)
        elif job.state is JobState.CANCELLED:
            result.cancelled.append(job)
        else:
            result.failed.append(job)
    return result


def prune_chunk(conn: sqlite3.Connection, rule: PruneRule) -> int:
    """Delete up to CHUNK jobs for one rule (age first, then count)."""
    if rule.state not in TERMINAL_STATES:
        return 0  # retention never touches live jobs
    params: dict[str, Any] = {
        "state": rule.state.value,
        "task": rule.task,
        "exclude": dumps_str(list(rule.exclude_tasks)),
        "chunk": CHUNK,
    }
    deleted: list[Row] = []
    if rule.max_age is not None:
        params["before"] = time.time() - rule.max_age
        deleted = conn.execute(Q.prune_by_age, params).fetchall()
    if not deleted and rule.max_count is not None:
        params["keep"] = max(0, rule.max_count)
        deleted = conn.execute(Q.prune_by_count, params).fetchall()
    _remember_keys(conn, deleted)
    return len(deleted)


def prune_history(conn: sqlite3.Connection) -> None:
    """Drop expired idempotency keys and rate-limit starts out of every window."""
    now = time.time()
    conn.execute(Q.prune_keys, {"now": now})
    conn.execute(Q.prune_rate_starts, {"now": now})


# -- queues, circuits, heartbeats ------------------------------------------------


def configure_queue(
    conn: sqlite3.Connection, name: str, max_size: int | None, ttl: float | None
) -> None:
    conn.execute(Q.configure_queue, {"name": name, "max_size": max_size, "ttl": ttl})


def set_queue_paused(conn: sqlite3.Connection, name: str, paused: bool) -> None:
    conn.execute(Q.set_queue_paused, {"name": name, "paused": int(paused)})


def reset_circuit(conn: sqlite3.Connection, task: str) -> None:
    conn.execute(Q.reset_circuit, {"task": task})


def record_heartbeat(conn: sqlite3.Connection, worker: WorkerInfo) -> None:
    params = {
        "id": worker.id,
        "info": worker_blob(worker).decode(),
        "now": time.time(),
        "heartbeat_interval": float(worker.heartbeat_interval),
    }
    conn.execute(Q.record_heartbeat, params)


def remove_worker(conn: sqlite3.Connection, worker_id: str) -> None:
    conn.execute(Q.remove_worker, {"id": worker_id})


def prune_workers(conn: sqlite3.Connection, older_than: float) -> int:
    cursor = conn.execute(Q.prune_workers, {"before": time.time() - older_than})
    return int(cursor.rowcount)

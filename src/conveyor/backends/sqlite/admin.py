"""Acting on jobs (cancel, dead-letter retry, deletes, purges), queues,
circuits and heartbeats: each a synchronous transaction in a connection's
thread (see enqueue.py); listings run on the reader.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from conveyor.backends.base import (
    CircuitInfo,
    CircuitState,
    JobFilter,
    QueueInfo,
    WorkerInfo,
    earlier_retry,
)
from conveyor.backends.resume import FINISHED_STATES, replace_dependency, resumed_dependents
from conveyor.backends.rows import worker_blob, worker_from_blob
from conveyor.backends.sqlite.connection import ThreadConnection
from conveyor.backends.sqlite.decode import Row, job_from_row
from conveyor.backends.sqlite.dependencies import finished_with_dependents, resolve_dependents
from conveyor.backends.sqlite.queries import Q, json_param
from conveyor.backends.sqlite.reads import filter_params, get_jobs
from conveyor.errors import InvalidStateError, JobNotFound
from conveyor.job import Job, JobState
from conveyor.serialization import dumps_str, loads

#: Rows deleted per transaction by purges and retention, so a big cleanup never
#: holds the write lock for long (the caller loops until a chunk comes back short).
CHUNK = 5000

_CIRCUIT_STATES = {s.value: s for s in CircuitState}


def cancel_job(conn: sqlite3.Connection, job_id: str) -> tuple[Job | None, set[str]]:
    """The job (``None``: no such job) and the queues of the dependents it
    released (those with policy run), to wake."""
    now = time.time()
    row = conn.execute(Q.cancel_job, {"id": job_id, "now": now}).fetchone()
    if row is not None:
        finished = finished_with_dependents([row])
        wake = resolve_dependents(conn, finished, now) if finished else set()
        return job_from_row(row), wake
    jobs = get_jobs(conn, [job_id])  # terminal (unchanged) or missing
    return (jobs[0] if jobs else None), set()


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
    _resume_dependents(conn, job_id, new_id)
    return get_jobs(conn, [new_id])[0]


def _resume_dependents(conn: sqlite3.Connection, original: str, copy: str) -> None:
    """The jobs cancelled ``dependency_failed`` downstream of ``original`` go back
    to blocked, waiting on ``copy`` instead (see :mod:`conveyor.backends.resume`).
    One query per level of the chain: a dead-letter retry is rare."""
    found: dict[str, list[str]] = {}
    level = [original]
    while level:
        rows = conn.execute(Q.cancelled_dependents, {"ids": json_param(level)}).fetchall()
        level = [job_id for job_id, _ in rows if job_id not in found]
        for job_id, depends_on in rows:
            found[job_id] = loads(depends_on)
    if not found:
        return
    named = sorted({d for deps in found.values() for d in deps})
    states = dict(conn.execute(Q.dependency_states, {"ids": json_param(named)}).fetchall())
    states[copy] = JobState.WAITING.value
    updates: list[tuple[str, str]] = []
    edges: list[tuple[str, str]] = []
    for job_id in resumed_dependents(original, found, states):
        depends_on = replace_dependency(found[job_id], original, copy)
        updates.append((job_id, json_param(depends_on)))
        edges.extend((d, job_id) for d in depends_on if states.get(d) not in FINISHED_STATES)
        states[job_id] = JobState.BLOCKED.value
    conn.executemany(Q.resume_dependent, updates)
    conn.executemany(Q.add_dependencies, edges)
    conn.execute(Q.mark_has_dependents, {"ids": json_param(sorted({d for d, _ in edges}))})


def remember_final_states(conn: sqlite3.Connection, deleted: list[Row]) -> None:
    """Deleted rows are (idempotency_key, id, state): keys keep the final state."""
    keyed = [(state, key, job_id) for key, job_id, state in deleted if key is not None]
    if keyed:
        conn.executemany(Q.remember_final_state, keyed)


def delete_jobs(conn: sqlite3.Connection, job_ids: Sequence[str]) -> int:
    deleted = conn.execute(Q.delete_jobs, {"ids": dumps_str(list(job_ids))}).fetchall()
    remember_final_states(conn, deleted)
    return len(deleted)


def purge_chunk(conn: sqlite3.Connection, where: JobFilter) -> int:
    params = filter_params(where)
    params["chunk"] = CHUNK
    deleted = conn.execute(Q.purge_jobs, params).fetchall()
    remember_final_states(conn, deleted)
    return len(deleted)


async def purge_jobs(writer: ThreadConnection, where: JobFilter) -> int:
    total = 0
    while True:  # chunked: other writers get the lock between chunks
        deleted = await writer.write(purge_chunk, where)
        total += deleted
        if deleted < CHUNK:
            return total


# -- queues, circuits, heartbeats ------------------------------------------------


def configure_queue(conn: sqlite3.Connection, info: QueueInfo) -> None:
    params = {
        "name": info.name,
        "max_size": info.max_size,
        "ttl": info.ttl,
        "fairness": info.fairness,
        "weights": dumps_str(info.weights) if info.weights else None,
    }
    was = conn.execute(Q.queue_fairness, {"name": info.name}).fetchone()
    conn.execute(Q.configure_queue, params)
    if bool(was and was[0]) != bool(info.fairness):
        # Every job of the queue carries its fairness (jobs_fair, the triggers);
        # this write transaction keeps enqueues out until the flags are set.
        conn.execute(Q.mark_queue_fair, {"name": info.name, "fair": 1 if info.fairness else None})
    # The triggers register tenants only while a queue is fair.
    conn.execute(
        Q.fair_tenants_fill if info.fairness else Q.fair_tenants_clear, {"name": info.name}
    )


def set_queue_paused(conn: sqlite3.Connection, name: str, paused: bool) -> None:
    conn.execute(Q.set_queue_paused, {"name": name, "paused": int(paused)})
    if not paused:
        conn.execute(Q.undispatch_queue, {"name": name})


def reset_circuit(conn: sqlite3.Connection, task: str) -> None:
    conn.execute(Q.reset_circuit, {"task": task})


def clear_circuit_failures(conn: sqlite3.Connection, task: str | None) -> None:
    conn.execute(Q.clear_circuit_failures, {"task": task})


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

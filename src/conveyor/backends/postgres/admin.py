"""Acting on jobs (cancel, dead-letter retry, deletes, purges), queues,
circuits and heartbeats. A change that makes work available also sends the
NOTIFY, in the same transaction; the caller wakes this process's waiters."""

from __future__ import annotations

import json
from collections.abc import Sequence

from conveyor.backends.base import (
    CircuitInfo,
    CircuitState,
    JobFilter,
    QueueInfo,
    WorkerInfo,
    earlier_retry,
)
from conveyor.backends.postgres.connection import Conn, Pool
from conveyor.backends.postgres.decode import job_from_row
from conveyor.backends.postgres.queries import Queries
from conveyor.backends.postgres.reads import filter_args, get_jobs
from conveyor.backends.postgres.settle import CIRCUIT_STATES
from conveyor.backends.resume import FINISHED_STATES, replace_dependency, resumed_dependents
from conveyor.backends.rows import worker_blob, worker_from_blob
from conveyor.errors import InvalidStateError, JobNotFound
from conveyor.job import Job, JobState

#: Rows deleted per statement by purges and retention.
CHUNK = 5000


async def cancel_job(pool: Pool, q: Queries, job_id: str) -> Job | None:
    rows = await pool.fetch("cancel", q.cancel_job, job_id)
    if rows:
        return job_from_row(rows[0])
    jobs = await get_jobs(pool, q, [job_id])  # terminal (unchanged), or missing
    return jobs[0] if jobs else None


async def retry_failed(pool: Pool, q: Queries, job_id: str, new_id: str) -> Job:
    async with pool.acquire("retry") as conn, conn.transaction():
        target = await conn.fetchrow(q.retry_target_for_update, job_id)
        if target is None:
            raise JobNotFound(job_id)
        state, retried_as = target
        if state != JobState.FAILED.value:
            raise InvalidStateError(f"job {job_id} is {state}: only failed jobs can be retried")
        if retried_as is not None:
            rows = await conn.fetch(q.jobs_by_ids, [retried_as])
            return earlier_retry(job_id, retried_as, [job_from_row(r) for r in rows])
        queue = await conn.fetchval(q.insert_retry_copy, job_id, new_id)
        await conn.execute(q.mark_retried, job_id, new_id)
        await _resume_dependents(conn, q, job_id, new_id)
        await conn.execute(q.notify, [queue])
        rows = await conn.fetch(q.jobs_by_ids, [new_id])
    return job_from_row(rows[0])


async def _resume_dependents(conn: Conn, q: Queries, original: str, copy: str) -> None:
    """The jobs cancelled ``dependency_failed`` downstream of ``original`` go back
    to blocked, waiting on ``copy`` instead (see :mod:`conveyor.backends.resume`).
    One query per level of the chain, in the retry's transaction."""
    found: dict[str, list[str]] = {}
    level = [original]
    while level:
        rows = await conn.fetch(q.cancelled_dependents, level)
        level = [r[0] for r in rows if r[0] not in found]
        found.update((r[0], list(r[1])) for r in rows)
    if not found:
        return
    named = sorted({d for deps in found.values() for d in deps})
    rows = await conn.fetch(q.dependency_states_for_update, named)
    states: dict[str, str] = {r[0]: r[1] for r in rows}
    states[copy] = JobState.WAITING.value
    resumed = resumed_dependents(original, found, states)
    if not resumed:
        return
    edge_deps: list[str] = []
    edge_jobs: list[str] = []
    for job_id in resumed:
        for dep_id in replace_dependency(found[job_id], original, copy):
            if states.get(dep_id) not in FINISHED_STATES:
                edge_deps.append(dep_id)
                edge_jobs.append(job_id)
        states[job_id] = JobState.BLOCKED.value
    await conn.execute(q.resume_dependents, resumed, original, copy)
    await conn.execute(q.add_dependency_edges, edge_deps, edge_jobs)


async def delete_jobs(pool: Pool, q: Queries, job_ids: Sequence[str]) -> int:
    return int(await pool.fetchval("delete", q.delete_jobs, list(job_ids)))


async def purge_jobs(pool: Pool, q: Queries, where: JobFilter) -> int:
    total = 0
    while True:  # chunked: each statement holds its row locks briefly
        deleted = int(await pool.fetchval("purge", q.purge_chunk, *filter_args(where), CHUNK))
        total += deleted
        if deleted < CHUNK:
            return total


# -- queues, circuits, heartbeats ------------------------------------------------


async def configure_queue(pool: Pool, q: Queries, info: QueueInfo) -> None:
    weights = json.dumps(info.weights)
    async with pool.acquire("configure queue") as conn:
        # The usual case: the fairness stays as it is (no row: plain).
        if info.fairness is None:
            kept = await conn.fetchval(
                q.configure_queue_plain, info.name, info.max_size, info.ttl, weights
            )
        else:
            kept = await conn.fetchval(
                q.configure_queue_fair, info.name, info.max_size, info.ttl, info.fairness, weights
            )
        if kept is not None:
            return
        # A switch: every job of the queue carries its fairness (jobs_fair);
        # the lock keeps enqueues out until the flags are written.
        async with conn.transaction():
            await conn.execute(q.lock_jobs_for_fairness)
            await conn.execute(
                q.configure_queue, info.name, info.max_size, info.ttl, info.fairness, weights
            )
            await conn.execute(q.mark_queue_fair, info.name, info.fairness is not None)


async def set_queue_paused(pool: Pool, q: Queries, name: str, paused: bool) -> None:
    async with pool.acquire("pause queue") as conn, conn.transaction():
        await conn.execute(q.set_queue_paused, name, paused)
        if not paused:
            await conn.execute(q.undispatch_queue, name)
            await conn.execute(q.notify, [name])


async def list_circuits(pool: Pool, q: Queries) -> list[CircuitInfo]:
    rows = await pool.fetch("list circuits", q.list_circuits)
    return [
        CircuitInfo(task, CIRCUIT_STATES.get(state, CircuitState.OPEN), failures, open_until)
        for task, state, failures, open_until in rows
    ]


async def reset_circuit(pool: Pool, q: Queries, task: str) -> None:
    await pool.execute("reset circuit", q.reset_circuit, task)


async def clear_circuit_failures(pool: Pool, q: Queries, task: str | None) -> None:
    await pool.execute("clear circuit failures", q.clear_circuit_failures, task)


async def record_heartbeat(pool: Pool, q: Queries, worker: WorkerInfo) -> None:
    await pool.execute(
        "heartbeat",
        q.record_heartbeat,
        worker.id,
        worker_blob(worker),
        float(worker.heartbeat_interval),
    )


async def list_workers(pool: Pool, q: Queries) -> list[WorkerInfo]:
    rows = await pool.fetch("list workers", q.list_workers)
    return [worker_from_blob(*row) for row in rows]


async def remove_worker(pool: Pool, q: Queries, worker_id: str) -> None:
    await pool.execute("remove worker", q.remove_worker, worker_id)


async def prune_workers(pool: Pool, q: Queries, older_than: float) -> int:
    return int(await pool.fetchval("prune workers", q.prune_workers, older_than))

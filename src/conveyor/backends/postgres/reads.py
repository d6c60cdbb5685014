"""Reads: jobs by id, listings and counts, queue counts and the queues
themselves; one statement each (two for the queue views, on one connection)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from conveyor.backends.base import JobFilter, KeyCount, QueueInfo, RateKeyUse, TenantCount
from conveyor.backends.postgres.connection import Pool
from conveyor.backends.postgres.decode import job_from_row
from conveyor.backends.postgres.queries import Queries
from conveyor.job import Job, JobState
from conveyor.ratelimit import RateLimit


def filter_args(where: JobFilter) -> tuple[Any, ...]:
    """The eight JobFilter parameters of list_jobs/count_jobs/purge_chunk."""
    return (
        None if where.states is None else [JobState(s).value for s in where.states],
        where.queue,
        where.task,
        where.tenant,
        None if where.failure_reason is None else where.failure_reason.value,
        where.idempotency_key,
        where.finished_before,
        where.workflow_id,
    )


async def get_jobs(pool: Pool, q: Queries, job_ids: Sequence[str]) -> list[Job]:
    rows = await pool.fetch("get jobs", q.jobs_by_ids, list(job_ids))
    return [job_from_row(r) for r in rows]


async def list_jobs(pool: Pool, q: Queries, where: JobFilter, limit: int, offset: int) -> list[Job]:
    query = q.list_jobs if where.workflow_id is None else q.list_workflow_jobs
    rows = await pool.fetch("list jobs", query, *filter_args(where), limit, offset)
    return [job_from_row(r) for r in rows]


async def count_jobs(pool: Pool, q: Queries, where: JobFilter) -> int:
    if where.only_states():
        total = 0
        for state in {JobState(s) for s in where.states or ()}:
            total += int(await pool.fetchval("count", q.count_state, state.value))
        return total
    query = q.count_jobs if where.workflow_id is None else q.count_workflow_jobs
    return int(await pool.fetchval("count", query, *filter_args(where)))


async def queue_counts(pool: Pool, q: Queries) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}

    def zeros() -> dict[str, int]:
        return {s.value: 0 for s in JobState}

    async with pool.acquire("queue counts") as conn:
        for name, *_ in await conn.fetch(q.queue_rows):
            counts[name] = zeros()
        for queue, state, n in await conn.fetch(q.counts_by_queue):
            counts.setdefault(queue, zeros())[state] = int(n)
    return dict(sorted(counts.items()))


async def oldest_waiting(pool: Pool, q: Queries) -> dict[str, float]:
    rows = await pool.fetch("oldest waiting", q.oldest_waiting)
    return {queue: run_at for queue, run_at in rows}


async def list_queues(pool: Pool, q: Queries) -> list[QueueInfo]:
    async with pool.acquire("list queues") as conn:
        queues = {
            name: QueueInfo(
                name=name,
                paused=paused,
                max_size=max_size,
                ttl=ttl,
                fairness=fairness,
                weights={str(t): float(w) for t, w in json.loads(weights).items()},
            )
            for name, paused, max_size, ttl, fairness, weights in await conn.fetch(q.queue_rows)
        }
        for (queue,) in await conn.fetch(q.queue_names_with_jobs):
            if queue not in queues:
                queues[queue] = QueueInfo(name=queue)
    return sorted(queues.values(), key=lambda info: info.name)


async def tenant_counts(pool: Pool, q: Queries, queue: str, limit: int) -> list[TenantCount]:
    rows = await pool.fetch("tenant counts", q.tenant_counts, queue, max(0, limit))
    return [TenantCount(tenant, waiting, active) for tenant, waiting, active in rows]


async def key_counts(pool: Pool, q: Queries, tasks: Sequence[str], limit: int) -> list[KeyCount]:
    asked = set(tasks)
    rows = await pool.fetch("key counts", q.key_counts, sorted(asked), max(0, limit))
    return [
        KeyCount(task, key, active, waiting if task in asked else None)
        for task, key, active, waiting in rows
    ]


async def rate_key_usage(
    pool: Pool, q: Queries, rates: Mapping[str, RateLimit], limit: int
) -> list[RateKeyUse]:
    tasks = list(rates)
    periods = [rates[task].period for task in tasks]
    rows = await pool.fetch("rate key usage", q.rate_key_usage, tasks, periods, max(0, limit))
    return [RateKeyUse(task, key, used) for task, key, used in rows]

"""Reads: jobs by id (one pipeline), filtered lists and counts (``select-2.lua``),
and the per-queue summary (``queues-1.lua``) behind queue counts, the oldest
waiting job and the queue list.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from conveyor.backends import base
from conveyor.backends.fairness import rank_tenant_counts
from conveyor.backends.redis import decode
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.encode import filter_args
from conveyor.job import Job, JobState


async def get_jobs(conn: RedisConnection, job_ids: Sequence[str]) -> list[Job]:
    client, _ = conn.ready()
    ids = list(dict.fromkeys(job_ids))
    if not ids:
        return []
    keys = conn.keys
    async with conn.errors("get_jobs"):
        pipe = client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hgetall(keys.job(job_id))
            pipe.get(keys.payload(job_id))
        replies = await pipe.execute()
    out: list[Job] = []
    for i, job_id in enumerate(ids):
        row, payload = replies[2 * i], replies[2 * i + 1]
        if row:
            flat: list[Any] = [b"id", job_id.encode(), b"p", payload]
            for field, value in row.items():
                flat += (field, value)
            out.append(decode.job_from_hash(flat))
    return out


async def list_jobs(
    conn: RedisConnection, where: base.JobFilter, limit: int, offset: int
) -> list[Job]:
    k = conn.keys
    argv = ["list", max(0, offset), max(0, limit), *filter_args(where)]
    rows = await conn.run("select", [k.all, k.queues], argv)
    return decode.jobs_from_hashes(rows)


async def count_jobs(conn: RedisConnection, where: base.JobFilter) -> int:
    k = conn.keys
    argv = ["count", 0, 0, *filter_args(where)]
    return int(await conn.run("select", [k.all, k.queues], argv))


async def _queue_rows(conn: RedisConnection) -> list[Any]:
    """Per queue: name, configured, paused, max_size, ttl, counts by state, oldest
    waiting, fairness, weights by tenant code."""
    rows: list[Any] = await conn.run("queues", [conn.keys.queues], [])
    return rows


async def queue_counts(conn: RedisConnection) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for name, configured, _, _, _, counts, *_ in await _queue_rows(conn):
        by_state = {state.value: 0 for state in JobState}
        for field, value in decode.as_dict(counts).items():
            by_state[field.decode()] = int(value)
        if configured or any(by_state.values()):
            out[name.decode()] = by_state
    return dict(sorted(out.items()))


async def oldest_waiting(conn: RedisConnection) -> dict[str, float]:
    return {row[0].decode(): float(row[6]) for row in await _queue_rows(conn) if row[6]}


async def list_queues(conn: RedisConnection) -> list[base.QueueInfo]:
    out: list[base.QueueInfo] = []
    for name, configured, paused, max_size, ttl, counts, _, fair, weights in await _queue_rows(
        conn
    ):
        has_jobs = any(int(v) for v in decode.as_dict(counts).values())
        if not (configured or has_jobs):
            continue
        out.append(
            base.QueueInfo(
                name=name.decode(),
                paused=paused == b"1",
                max_size=int(max_size) if max_size else None,
                ttl=float(ttl) if ttl else None,
                fairness=fair.decode() if fair else None,
                weights={
                    code[1:].decode(): float(weight)
                    for code, weight in decode.as_dict(weights).items()
                    if code[:1] == b"1"  # a name (None has no weight)
                },
            )
        )
    return sorted(out, key=lambda q: q.name)


def decode_tenant(code: bytes) -> str | None:
    """A tenant from its code in the fair-queue keys: ``0`` None, ``1<name>`` a name."""
    return code[1:].decode() if code[:1] == b"1" else None


#: Jobs of the delayed and active indexes ``tenant_counts`` reads per round trip.
_SLICE = 1000


async def tenant_counts(conn: RedisConnection, queue: str, limit: int) -> list[base.TenantCount]:
    """Waiting jobs from ``tenants-2.lua`` (a fair queue: one ``ZCARD`` per
    (tenant, task)); delayed and active ones from their app-wide indexes, a
    slice at a time, so a large delayed index never holds Redis for long (a
    read for surfaces: not one snapshot)."""
    k = conn.keys
    flat = await conn.run("tenants", [k.delayed, k.active], [queue])
    waiting: Counter[str | None] = Counter()
    active: Counter[str | None] = Counter()
    for i in range(0, len(flat), 3):
        waiting[decode_tenant(flat[i])] += int(flat[i + 1])
    await _count_index(conn, k.delayed, queue, b"delayed", waiting)
    await _count_index(conn, k.active, queue, b"active", active)
    counts = (base.TenantCount(t, waiting[t], active[t]) for t in waiting.keys() | active.keys())
    return rank_tenant_counts(counts, limit)


async def _count_index(
    conn: RedisConnection, index: str, queue: str, state: bytes, into: Counter[str | None]
) -> None:
    """Count per tenant the jobs of ``queue`` in state ``state`` listed by ``index``."""
    client, _ = conn.ready()
    wanted = queue.encode()
    start = 0
    async with conn.errors("tenant_counts"):
        while True:
            ids = await client.zrange(index, start, start + _SLICE - 1)
            if not ids:
                return
            pipe = client.pipeline(transaction=False)
            for job_id in ids:
                pipe.hmget(conn.keys.job(job_id.decode()), "q", "tn", "s")
            for q, tenant, s in await pipe.execute():
                if q == wanted and s == state:
                    into[tenant.decode() if tenant is not None else None] += 1
            start += _SLICE

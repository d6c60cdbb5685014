"""Job statistics: totals and per-minute series, added up in SQL (one
transaction per batch, so concurrent workers never lose an increment)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor.backends.base import DURATION_BUCKETS, JobStat, fit_buckets
from conveyor.backends.postgres.connection import Pool
from conveyor.backends.postgres.decode import Row
from conveyor.backends.postgres.queries import Queries

_WIDTH = len(DURATION_BUCKETS)


def _stat(row: Row) -> JobStat:
    task, queue, status, count, duration_sum, buckets, minute = row
    return JobStat(
        task, queue, status, int(count), float(duration_sum), fit_buckets(buckets), minute
    )


async def record_job_stats(pool: Pool, q: Queries, stats: Sequence[JobStat]) -> None:
    merged: dict[tuple[str, str, str], list[Any]] = {}
    for s in stats:
        key = (s.task, s.queue, s.status)
        row = merged.get(key)
        buckets = fit_buckets(s.buckets)
        if row is None:
            merged[key] = [s.count, s.duration_sum, buckets]
        else:
            row[0] += s.count
            row[1] += s.duration_sum
            row[2] = [a + b for a, b in zip(row[2], buckets, strict=True)]
    if not merged:
        return
    keys = sorted(merged)
    args = (
        [k[0] for k in keys],
        [k[1] for k in keys],
        [k[2] for k in keys],
        [int(merged[k][0]) for k in keys],
        [float(merged[k][1]) for k in keys],
        [int(b) for k in keys for b in merged[k][2]],
        _WIDTH,
    )
    async with pool.acquire("record job stats") as conn, conn.transaction():
        await conn.execute(q.add_stat_totals, *args)
        await conn.execute(q.add_stat_series, *args)


async def job_stat_totals(pool: Pool, q: Queries) -> list[JobStat]:
    return [_stat(r) for r in await pool.fetch("job stats", q.stat_totals)]


async def job_stat_series(pool: Pool, q: Queries, since: float) -> list[JobStat]:
    rows = await pool.fetch("job stats", q.stat_series, since)
    return [_stat(r) for r in rows]


async def prune_job_stats(pool: Pool, q: Queries, older_than: float) -> int:
    return int(await pool.fetchval("prune job stats", q.prune_stat_series, older_than))

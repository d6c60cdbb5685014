"""Job statistics: running totals and per-minute rows (``stats-record-2.lua``,
``stats-read-2.lua``); records.py converts the stored rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor.backends import base
from conveyor.backends.base import DURATION_BUCKETS, fit_buckets
from conveyor.backends.redis import records
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.encode import float_text


async def record_job_stats(conn: RedisConnection, stats: Sequence[base.JobStat]) -> None:
    if not stats:
        conn.ready()
        return
    argv: list[Any] = [len(DURATION_BUCKETS)]
    for stat in stats:
        argv += (stat.task, stat.queue, stat.status, stat.count, repr(stat.duration_sum))
        argv += fit_buckets(stat.buckets)
    k = conn.keys
    await conn.run("stats-record", [k.stats, k.stat_minutes], argv)


async def job_stat_totals(conn: RedisConnection) -> list[base.JobStat]:
    k = conn.keys
    flat = await conn.run("stats-read", [k.stats, k.stat_minutes], ["totals", 0])
    return sorted(records.stats_from_hash(flat, 0.0), key=records.stat_order)


async def job_stat_series(conn: RedisConnection, since: float) -> list[base.JobStat]:
    k = conn.keys
    minutes = await conn.run("stats-read", [k.stats, k.stat_minutes], ["series", float_text(since)])
    out: list[base.JobStat] = []
    for minute, flat in minutes:
        out.extend(sorted(records.stats_from_hash(flat, float(minute)), key=records.stat_order))
    return out


async def prune_job_stats(conn: RedisConnection, older_than: float) -> int:
    k = conn.keys
    return int(await conn.run("stats-read", [k.stats, k.stat_minutes], ["prune", older_than]))

"""Job statistics in SQLite: totals and per-minute series (SQL in ``stats.sql``).

Each function is the whole body of one transaction, run in a connection's own
thread. Bucket arrays are JSON text, added up here under the write lock
(``BEGIN IMMEDIATE``), so concurrent workers never lose an increment.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
import time
from collections.abc import Sequence
from importlib import resources
from typing import LiteralString

from conveyor.backends.base import JobStat, fit_buckets
from conveyor.backends.namedsql import parse_named_blocks, trusted_sql


@dataclasses.dataclass(frozen=True, slots=True)
class StatQueries:
    total_row: LiteralString
    upsert_total: LiteralString
    series_row: LiteralString
    upsert_series: LiteralString
    list_totals: LiteralString
    list_series: LiteralString
    prune_series: LiteralString


def _load() -> StatQueries:
    text = resources.files("conveyor.backends.sqlite").joinpath("stats.sql").read_text("utf-8")
    blocks = parse_named_blocks(text)
    return StatQueries(**{name: trusted_sql(sql) for name, sql in blocks.items()})


SQ = _load()


def _buckets(text: str | None) -> list[int]:
    return fit_buckets(json.loads(text) if text else [])


def _merge(
    conn: sqlite3.Connection,
    select: LiteralString,
    upsert: LiteralString,
    key: dict[str, object],
    stat: JobStat,
) -> None:
    row = conn.execute(select, key).fetchone()
    count, total, buckets = (0, 0.0, fit_buckets([]))
    if row is not None:
        count, total, buckets = int(row[0]), float(row[1]), _buckets(row[2])
    merged = [a + b for a, b in zip(buckets, fit_buckets(stat.buckets), strict=True)]
    conn.execute(
        upsert,
        {
            **key,
            "count": count + stat.count,
            "duration_sum": total + stat.duration_sum,
            "buckets": json.dumps(merged),
        },
    )


def record(conn: sqlite3.Connection, stats: Sequence[JobStat]) -> None:
    minute = float(math.floor(time.time() / 60.0) * 60)
    for stat in stats:
        key: dict[str, object] = {"task": stat.task, "queue": stat.queue, "status": stat.status}
        _merge(conn, SQ.total_row, SQ.upsert_total, key, stat)
        _merge(conn, SQ.series_row, SQ.upsert_series, {**key, "minute": minute}, stat)


def totals(conn: sqlite3.Connection) -> list[JobStat]:
    return [
        JobStat(task, queue, status, int(count), float(dsum), _buckets(buckets), 0.0)
        for task, queue, status, count, dsum, buckets in conn.execute(SQ.list_totals)
    ]


def series(conn: sqlite3.Connection, since: float) -> list[JobStat]:
    return [
        JobStat(task, queue, status, int(count), float(dsum), _buckets(buckets), float(minute))
        for minute, task, queue, status, count, dsum, buckets in conn.execute(
            SQ.list_series, {"since": since}
        )
    ]


def prune(conn: sqlite3.Connection, older_than: float) -> int:
    cursor = conn.execute(SQ.prune_series, {"before": time.time() - older_than})
    return int(cursor.rowcount)

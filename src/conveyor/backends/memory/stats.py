"""Job statistics in memory: cumulative totals and per-minute series rows."""

from __future__ import annotations

import math
from collections.abc import Sequence

from conveyor.backends.base import JobStat, fit_buckets
from conveyor.backends.memory.store import Store


def _copy(stat: JobStat, minute: float) -> JobStat:
    return JobStat(
        stat.task,
        stat.queue,
        stat.status,
        stat.count,
        stat.duration_sum,
        list(stat.buckets),
        minute,
    )


def _add(into: JobStat, stat: JobStat) -> None:
    into.count += stat.count
    into.duration_sum += stat.duration_sum
    for i, n in enumerate(fit_buckets(stat.buckets)):
        into.buckets[i] += n


def record_job_stats(store: Store, stats: Sequence[JobStat]) -> None:
    minute = float(math.floor(store.now() / 60.0) * 60)
    for stat in stats:
        key = (stat.task, stat.queue, stat.status)
        total = store.stat_totals.get(key)
        if total is None:
            store.stat_totals[key] = total = JobStat(*key)
        _add(total, stat)
        row = store.stat_series.get((minute, *key))
        if row is None:
            store.stat_series[(minute, *key)] = row = JobStat(*key, minute=minute)
        _add(row, stat)


def job_stat_totals(store: Store) -> list[JobStat]:
    return [_copy(stat, 0.0) for _, stat in sorted(store.stat_totals.items())]


def job_stat_series(store: Store, since: float) -> list[JobStat]:
    return [
        _copy(stat, key[0]) for key, stat in sorted(store.stat_series.items()) if key[0] >= since
    ]


def prune_job_stats(store: Store, older_than: float) -> int:
    cutoff = store.now() - older_than
    old = [key for key in store.stat_series if key[0] < cutoff]
    for key in old:
        del store.stat_series[key]
    return len(old)

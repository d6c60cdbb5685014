"""Job statistics in memory: cumulative totals and per-minute series rows.

The store's lock is held by the caller around every method.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from conveyor.backends.base import DURATION_BUCKETS, JobStat

_Key = tuple[str, str, str]


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
    for i, n in enumerate(stat.buckets[: len(DURATION_BUCKETS)]):
        into.buckets[i] += n


class JobStatTable:
    def __init__(self) -> None:
        self.totals: dict[_Key, JobStat] = {}
        self.series: dict[tuple[float, str, str, str], JobStat] = {}

    def record(self, stats: Sequence[JobStat], now: float) -> None:
        minute = float(math.floor(now / 60.0) * 60)
        for stat in stats:
            key = (stat.task, stat.queue, stat.status)
            total = self.totals.get(key)
            if total is None:
                self.totals[key] = total = JobStat(*key)
            _add(total, stat)
            row = self.series.get((minute, *key))
            if row is None:
                self.series[(minute, *key)] = row = JobStat(*key, minute=minute)
            _add(row, stat)

    def list_totals(self) -> list[JobStat]:
        return [_copy(stat, 0.0) for _, stat in sorted(self.totals.items())]

    def list_series(self, since: float) -> list[JobStat]:
        return [_copy(stat, key[0]) for key, stat in sorted(self.series.items()) if key[0] >= since]

    def prune(self, cutoff: float) -> int:
        old = [key for key in self.series if key[0] < cutoff]
        for key in old:
            del self.series[key]
        return len(old)

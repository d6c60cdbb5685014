"""Job statistics: increments add up into totals and per-minute series rows;
series rows are pruned by age, totals never; concurrent reporters lose nothing."""

from __future__ import annotations

import asyncio
import math

from conveyor.backends.base import DURATION_BUCKETS, Backend, JobStat


def stat(
    task: str = "email.send",
    queue: str = "default",
    status: str = "completed",
    count: int = 1,
    duration: float = 0.02,
) -> JobStat:
    """``count`` runs that each took ``duration`` seconds."""
    buckets = [0] * len(DURATION_BUCKETS)
    index = next(i for i, bound in enumerate(DURATION_BUCKETS) if duration <= bound)
    buckets[index] = count
    return JobStat(task, queue, status, count, duration * count, buckets)


def by_key(stats: list[JobStat]) -> dict[tuple[str, str, str], JobStat]:
    return {(s.task, s.queue, s.status): s for s in stats}


async def test_nothing_recorded_reads_empty(backend: Backend) -> None:
    assert await backend.job_stat_totals() == []
    assert await backend.job_stat_series(0.0) == []
    await backend.record_job_stats([])
    assert await backend.job_stat_totals() == []


async def test_increments_add_up_per_key(backend: Backend) -> None:
    await backend.record_job_stats([stat(count=3, duration=0.02), stat(status="failed")])
    await backend.record_job_stats([stat(count=2, duration=1.5), stat(task="other", queue="q2")])
    totals = by_key(await backend.job_stat_totals())
    assert set(totals) == {
        ("email.send", "default", "completed"),
        ("email.send", "default", "failed"),
        ("other", "q2", "completed"),
    }
    done = totals["email.send", "default", "completed"]
    assert done.count == 5
    assert math.isclose(done.duration_sum, 3 * 0.02 + 2 * 1.5)
    assert done.buckets[DURATION_BUCKETS.index(0.025)] == 3
    assert done.buckets[DURATION_BUCKETS.index(2.5)] == 2
    assert sum(done.buckets) == 5
    assert len(done.buckets) == len(DURATION_BUCKETS)
    assert done.minute == 0.0
    assert totals["email.send", "default", "failed"].count == 1


async def test_series_rows_are_per_minute_on_the_backend_clock(backend: Backend) -> None:
    now = await backend.now()
    await backend.record_job_stats([stat(count=4), stat(status="retried", duration=400.0)])
    rows = await backend.job_stat_series(now - 3600)
    assert len(rows) == 2
    minutes = {row.minute for row in rows}
    (minute,) = minutes
    assert minute % 60 == 0
    assert now - 120 <= minute <= now + 60
    retried = by_key(rows)["email.send", "default", "retried"]
    assert retried.buckets[-1] == 1  # beyond the last finite bound: +Inf
    assert by_key(rows)["email.send", "default", "completed"].count == 4
    assert await backend.job_stat_series(minute + 60) == []


async def test_prune_drops_old_series_rows_but_keeps_totals(backend: Backend) -> None:
    await backend.record_job_stats([stat(count=2)])
    assert await backend.prune_job_stats(3600) == 0
    assert len(await backend.job_stat_series(0.0)) == 1
    # Every row is older than "the minute that started 60 s in the future".
    assert await backend.prune_job_stats(-120) == 1
    assert await backend.job_stat_series(0.0) == []
    (total,) = await backend.job_stat_totals()
    assert total.count == 2


async def test_concurrent_reporters_lose_nothing(backend_pair: tuple[Backend, Backend]) -> None:
    first, second = backend_pair

    async def report(backend: Backend) -> None:
        for _ in range(20):
            await backend.record_job_stats([stat(count=1), stat(status="failed", count=2)])

    await asyncio.gather(report(first), report(second), report(first), report(second))
    totals = by_key(await first.job_stat_totals())
    assert totals["email.send", "default", "completed"].count == 80
    assert totals["email.send", "default", "failed"].count == 160
    assert sum(totals["email.send", "default", "failed"].buckets) == 160
    series_total = sum(row.count for row in await second.job_stat_series(0.0))
    assert series_total == 240

"""Chart geometry from per-minute job statistics (pure functions)."""

from __future__ import annotations

from conveyor.backends.base import JobStat
from conveyor.server.dashboard.charts import HEIGHT, PAD_BOTTOM, build_chart, nice_ceiling

NOW = 1_800_000_030.0  # 30 s into a minute
MINUTE = NOW - 30


def stat(status: str, count: int, minutes_ago: int) -> JobStat:
    return JobStat("t", "q", status, count=count, minute=MINUTE - 60 * minutes_ago)


def ys(points: str) -> list[float]:
    return [float(p.split(",")[1]) for p in points.split()]


def test_nice_ceiling() -> None:
    assert [nice_ceiling(v) for v in (0, 0.3, 1, 1.1, 3, 7, 10, 11, 480)] == [
        1, 1, 1, 2, 5, 10, 10, 20, 500,
    ]  # fmt: skip


def test_hour_chart_bins_per_minute_and_sums_failed_with_expired() -> None:
    stats = [
        stat("completed", 4, 0),
        stat("completed", 2, 59),
        stat("completed", 9, 60),  # before the window: left out
        stat("failed", 1, 3),
        stat("expired", 2, 3),
        stat("retried", 7, 3),  # an attempt that will run again is not a failure
    ]
    chart = build_chart("hour", "Last hour", stats, NOW, 60, 60)
    completed, failed = chart.lines
    assert (completed.total, failed.total) == (6, 3)
    assert completed.peak == 4
    heights = ys(completed.points)
    assert len(heights) == 60
    baseline = HEIGHT - PAD_BOTTOM
    assert heights[-1] < heights[0] < baseline  # newest minute highest; first has 2
    assert ys(failed.points)[-4] < baseline
    assert [t.label for t in chart.y_ticks] == ["0", "2.5", "5"]
    assert chart.has_data


def test_day_chart_averages_bins_to_jobs_per_minute() -> None:
    stats = [stat("completed", 30, 1), stat("completed", 15, 5)]
    chart = build_chart("day", "Last day", stats, NOW, 96, 900)
    assert chart.lines[0].total == 45
    assert chart.lines[0].peak == 3.0  # 45 runs in one 15-minute bin
    assert "15-min bins" in chart.unit


def test_an_empty_chart_is_flat_and_says_so() -> None:
    chart = build_chart("hour", "Last hour", [], NOW, 60, 60)
    assert not chart.has_data
    assert set(ys(chart.lines[0].points)) == {HEIGHT - PAD_BOTTOM}
    assert chart.summary == "Last hour: 0 completed, 0 failed"

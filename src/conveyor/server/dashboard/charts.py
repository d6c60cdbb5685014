"""Throughput charts: the backend's per-minute job statistics, binned and laid
out as inline SVG geometry (the template only draws what this computes).

The series live in the backend (``Backend.job_stat_series``), written by every
worker, so a chart shows the same history after ``conveyor serve`` or the
workers restart. ``failed`` counts runs that ended the job in the dead-letter
queue (``failed`` and ``expired``); an error that will be retried is not a failure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from conveyor.backends.base import JobStat

#: Statuses drawn, and the stat statuses each one sums.
SERIES: tuple[tuple[str, frozenset[str]], ...] = (
    ("completed", frozenset({"completed"})),
    ("failed", frozenset({"failed", "expired"})),
)
#: The plot area only: axis labels are HTML around it, so they keep their size
#: while the SVG stretches to any width.
WIDTH, HEIGHT = 720, 160
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 0, 0, 4, 4


@dataclass(frozen=True, slots=True)
class Line:
    name: str
    points: str
    """SVG polyline points, ``"x,y x,y ..."``."""
    total: int
    peak: float


@dataclass(frozen=True, slots=True)
class Tick:
    pos: float
    label: str


@dataclass(frozen=True, slots=True)
class Chart:
    key: str
    title: str
    unit: str
    lines: list[Line]
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    width: int = WIDTH
    height: int = HEIGHT
    left: int = PAD_LEFT
    right: int = WIDTH - PAD_RIGHT
    top: int = PAD_TOP
    bottom: int = HEIGHT - PAD_BOTTOM

    @property
    def has_data(self) -> bool:
        return any(line.total for line in self.lines)

    @property
    def summary(self) -> str:
        parts = ", ".join(f"{line.total} {line.name}" for line in self.lines)
        return f"{self.title}: {parts}"


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is >= ``value`` (>= 1)."""
    if value <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)  # pragma: no cover - the loop always returns


def _label(value: float) -> str:
    return f"{value:g}" if value < 10 or value == int(value) else f"{value:.0f}"


def build_chart(
    key: str, title: str, stats: list[JobStat], now: float, bins: int, bin_seconds: int
) -> Chart:
    """``bins`` bins of ``bin_seconds`` ending with the current one; values are
    jobs per minute (a bin's count divided by its minutes)."""
    last_start = math.floor(now / bin_seconds) * bin_seconds
    first_start = last_start - (bins - 1) * bin_seconds
    counts = {name: [0] * bins for name, _ in SERIES}
    for stat in stats:
        index = int((stat.minute - first_start) // bin_seconds)
        if not 0 <= index < bins:
            continue
        for name, statuses in SERIES:
            if stat.status in statuses:
                counts[name][index] += stat.count
    per_minute = bin_seconds / 60
    rates = {name: [c / per_minute for c in values] for name, values in counts.items()}
    y_max = nice_ceiling(max((max(v) for v in rates.values()), default=0.0))
    plot_w = WIDTH - PAD_RIGHT - PAD_LEFT
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    step = plot_w / max(1, bins - 1)

    def x(i: int) -> float:
        return PAD_LEFT + i * step

    def y(v: float) -> float:
        return PAD_TOP + plot_h * (1 - v / y_max)

    lines = [
        Line(
            name,
            " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(rates[name])),
            sum(counts[name]),
            max(rates[name], default=0.0),
        )
        for name, _ in SERIES
    ]
    y_ticks = [Tick(y(y_max * f), _label(y_max * f)) for f in (0.0, 0.5, 1.0)]
    x_ticks = []
    for i in (0, bins // 2, bins - 1):
        when = datetime.fromtimestamp(first_start + i * bin_seconds, UTC)
        x_ticks.append(Tick(x(i), when.strftime("%H:%M")))
    unit = (
        "jobs per minute"
        if bin_seconds == 60
        else f"jobs per minute ({bin_seconds // 60}-min bins)"
    )
    return Chart(key, title, unit, lines, y_ticks, x_ticks)


def throughput_charts(stats: list[JobStat], now: float) -> list[Chart]:
    """The last hour (per minute) and the last day (15-minute bins)."""
    return [
        build_chart("hour", "Last hour", stats, now, 60, 60),
        build_chart("day", "Last day", stats, now, 96, 900),
    ]

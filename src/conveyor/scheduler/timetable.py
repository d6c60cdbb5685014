"""The slots of one stored schedule: its timing bounded by start, end and limit.

Pure functions of the record and a time, shared by the scheduler (what to
fire, what comes next) and ``app.schedules`` (resume, set-cron, next fires).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from conveyor.backends.base import ScheduleRecord, ScheduleSpec
from conveyor.scheduler.cron import Cron, Interval, Timing, fire_time_text

#: ``start`` is a slot when it matches: look from just before it.
_BEFORE = 1e-6


@dataclass(frozen=True, slots=True)
class Timetable:
    timing: Timing
    start: float | None
    end: float | None
    limit: int | None

    @classmethod
    def of(cls, record: ScheduleRecord) -> Timetable:
        """The timetable in force: the record's cron/every (an override or the spec's)."""
        return timetable(record.spec, record.cron, record.every)

    def _bounded(self, slot: float, fires: int) -> float | None:
        if self.limit is not None and fires >= self.limit:
            return None
        if self.end is not None and slot > self.end:
            return None
        return slot

    def first(self, now: float, fires: int = 0) -> float | None:
        """The first slot strictly after ``now`` and not before ``start``;
        ``None`` once the schedule is finished (past ``end``, ``limit`` reached)."""
        after = now
        if self.start is not None and self.start - _BEFORE > now:
            after = self.start - _BEFORE
        return self._bounded(self.timing.next_after(after), fires)

    def after_fire(self, slot: float, fires: int) -> float | None:
        """The slot after ``slot``, given ``fires`` fires so far (this one included)."""
        return self._bounded(self.timing.next_after(slot), fires)

    def fire_text(self, slot: float) -> str:
        """``slot`` in UTC ISO 8601, milliseconds only when the interval has them."""
        fractional = isinstance(self.timing, Interval) and self.timing.fractional
        return fire_time_text(slot, fractional)

    def fire_key(self, name: str, slot: float) -> str:
        """The idempotency key of the fire of ``slot``: ``schedule:<name>:<UTC time>``."""
        return f"schedule:{name}:{self.fire_text(slot)}"


@functools.lru_cache(maxsize=512)
def _timing(cron: str | None, every: float | None, timezone: str, anchor: float) -> Timing:
    if cron is not None:
        return Cron.parse(cron, timezone)
    assert every is not None, "a schedule has a cron or an interval"
    return Interval(every, anchor)


def timetable(spec: ScheduleSpec, cron: str | None, every: float | None) -> Timetable:
    timing = _timing(cron, every, spec.timezone, spec.start or 0.0)
    return Timetable(timing, spec.start, spec.end, spec.limit)

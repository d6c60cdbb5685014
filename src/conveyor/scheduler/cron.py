"""Fire times: cron expressions and intervals, as pure functions of time.

Cron parsing and field matching come from ``cronsim`` (the evaluator behind
Healthchecks, which follows Debian cron closely). This module adds what a
durable scheduler needs on top: whole POSIX instants, named time zones, and
one documented rule for daylight-saving transitions — Debian cron's:

- A **fixed-time** expression (neither the minute nor the hour field starts
  with ``*``, e.g. ``30 2 * * *``) names wall-clock times. It fires once per
  matching local time: a time that occurs twice (autumn fall-back) fires at
  its first occurrence only; a time that does not exist (spring-forward gap)
  fires at the first instant after the gap, once even when several slots fall
  in the gap.
- A **wildcard** expression (``*/15 * * * *``, ``0 * * * *``, any 6-field
  expression whose minute or hour starts with ``*``) follows real time: it
  fires at every instant whose local time matches, so an hourly job fires
  every real hour through both transitions (twice during the repeated hour,
  not at all during the hour that does not exist).

In UTC (the default) there are no transitions and both rules agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

#: The shorthand names cron users know, as the 5-field expressions they mean.
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

#: The shortest interval accepted: a scheduler wakes at most this often per schedule.
MIN_INTERVAL = 0.1

#: A probe date for validation (any date works; cronsim checks the fields).
_PROBE = datetime(2000, 1, 1)


class InvalidTiming(ValueError):
    """A cron expression, interval or time zone that cannot be used."""


def load_zone(name: str) -> tzinfo:
    """The IANA time zone ``name`` (``"UTC"``, ``"Europe/Berlin"``)."""
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidTiming(
            f"unknown time zone {name!r} (use an IANA name like 'Europe/Berlin')"
        ) from exc


def normalize_cron(expression: str) -> str:
    """``expression`` checked and cleaned: 5 fields, or 6 with seconds first.

    Raises :class:`InvalidTiming` naming the problem.
    """
    if not isinstance(expression, str):
        raise InvalidTiming(f"a cron expression must be a string, not {type(expression).__name__}")
    text = " ".join(expression.split())
    text = ALIASES.get(text.lower(), text)
    fields = text.split(" ")
    if len(fields) not in (5, 6):
        raise InvalidTiming(
            f"cron expression {expression!r} has {len(fields) if text else 0} fields; "
            "use 5 (minute hour day month weekday) or 6 (second first)"
        )
    try:
        iterator = CronSim(text, _PROBE)
        next(iterator)
    except CronSimError as exc:
        raise InvalidTiming(f"invalid cron expression {expression!r}: {exc}") from None
    except StopIteration:
        raise InvalidTiming(f"cron expression {expression!r} never fires") from None
    return text


def check_interval(seconds: float) -> float:
    if not math.isfinite(seconds) or seconds < MIN_INTERVAL:
        raise InvalidTiming(f"interval must be at least {MIN_INTERVAL}s, not {seconds!r}")
    return float(seconds)


@dataclass(frozen=True, slots=True)
class Cron:
    """A cron expression in a time zone: ``next_after(t)`` is its first fire
    instant strictly after ``t`` (POSIX seconds)."""

    expression: str
    zone: tzinfo

    @classmethod
    def parse(cls, expression: str, timezone: str = "UTC") -> Cron:
        return cls(normalize_cron(expression), load_zone(timezone))

    @property
    def wall_clock(self) -> bool:
        """Fixed-time (wall-clock) rather than wildcard (real-time); see the module doc."""
        fields = self.expression.split(" ")
        minute, hour = (fields[1], fields[2]) if len(fields) == 6 else (fields[0], fields[1])
        return not minute.startswith("*") and not hour.startswith("*")

    def next_after(self, after: float) -> float:
        if self.zone is UTC or not self.wall_clock:
            start = datetime.fromtimestamp(after, self.zone)
            return next(CronSim(self.expression, start)).timestamp()
        naive = datetime.fromtimestamp(after, self.zone).replace(tzinfo=None, fold=0)
        for local in CronSim(self.expression, naive):
            instant = self._instant(local)
            # Slots of a repeated hour map to their first occurrence, and slots in
            # a gap to its end: either may lie at or before ``after``.
            if instant > after:
                return instant
        raise InvalidTiming(f"cron expression {self.expression!r} has no fire after {after}")

    def _instant(self, local: datetime) -> float:
        """The instant of a wall-clock time: its first occurrence, or for a time
        inside a gap, the first instant after the gap."""
        first = local.replace(tzinfo=self.zone, fold=0)
        instant = first.timestamp()
        if datetime.fromtimestamp(instant, self.zone).replace(tzinfo=None) == local:
            return instant
        return self._gap_end(local)

    def _gap_end(self, local: datetime) -> float:
        # In a gap, fold=0 reads the time with the offset before the transition
        # (an instant after the gap) and fold=1 with the one after (an instant
        # before it): the transition lies between; find its whole second.
        after = math.floor(local.replace(tzinfo=self.zone, fold=0).timestamp())
        before = math.floor(local.replace(tzinfo=self.zone, fold=1).timestamp())
        offset_after = datetime.fromtimestamp(after, self.zone).utcoffset()
        while after - before > 1:
            middle = (after + before) // 2
            if datetime.fromtimestamp(middle, self.zone).utcoffset() == offset_after:
                after = middle
            else:
                before = middle
        return float(after)


@dataclass(frozen=True, slots=True)
class Interval:
    """Every ``seconds``, on a grid anchored at ``anchor`` (``start``, else the
    Unix epoch, so that ``every="1h"`` fires on the hour and every scheduler
    computes the same slots)."""

    seconds: float
    anchor: float = 0.0

    def next_after(self, after: float) -> float:
        steps = math.floor((after - self.anchor) / self.seconds) + 1
        slot = self.anchor + steps * self.seconds
        while slot <= after:  # float rounding at a grid point
            steps += 1
            slot = self.anchor + steps * self.seconds
        return slot

    @property
    def fractional(self) -> bool:
        """Slots fall between whole seconds (fire-time keys then carry milliseconds)."""
        return self.seconds % 1 != 0 or self.anchor % 1 != 0


Timing = Cron | Interval


def fire_time_text(instant: float, fractional: bool) -> str:
    """``2026-11-22T12:30:00Z`` (with ``.200`` milliseconds when ``fractional``)."""
    moment = datetime.fromtimestamp(instant, UTC)
    text = moment.isoformat(timespec="milliseconds" if fractional else "seconds")
    return text.replace("+00:00", "Z")

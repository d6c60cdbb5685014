"""``app.schedule(...)`` arguments checked and turned into a :class:`ScheduleSpec`.

Everything is validated at declaration (import time), so a bad cron, time zone
or option fails the deploy with :class:`InvalidSchedule` instead of a scheduler
at 3 a.m. The fingerprint is a hash of every field: a scheduler that finds a
stored schedule with another fingerprint knows the code changed it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from conveyor import serialization
from conveyor.backends.base import MisfirePolicy, ScheduleSpec
from conveyor.durations import parse_duration
from conveyor.errors import ConveyorError, InvalidSchedule
from conveyor.scheduler.cron import InvalidTiming, check_interval, load_zone, normalize_cron

#: Enqueue options a schedule may carry. ``delay``, ``run_at`` and
#: ``idempotency_key`` are the scheduler's own to set.
SCHEDULE_OPTIONS = frozenset(
    {"queue", "priority", "attempts", "timeout", "ttl", "tenant", "metadata"}
)
_DURATIONS = ("timeout", "ttl")


def build_spec(
    name: str,
    *,
    task: Any,
    cron: str | None = None,
    every: float | str | None = None,
    payload: Any = None,
    timezone: str = "UTC",
    start: datetime | float | None = None,
    end: datetime | float | None = None,
    limit: int | None = None,
    misfire: MisfirePolicy | str = MisfirePolicy.SKIP,
    options: Mapping[str, Any] | None = None,
) -> ScheduleSpec:
    """The spec of ``app.schedule(...)``; raises :class:`InvalidSchedule`."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidSchedule(f"a schedule needs a non-empty name, not {name!r}")

    def invalid(problem: str) -> InvalidSchedule:
        return InvalidSchedule(f"schedule {name!r}: {problem}")

    task_name = getattr(task, "name", task)
    if not isinstance(task_name, str) or not task_name:
        raise invalid(f"task must be a task name or a Task, not {task!r}")
    if (cron is None) == (every is None):
        raise invalid("give exactly one of cron= or every=")
    try:
        zone = load_zone(timezone)
        cron_text = normalize_cron(cron) if cron is not None else None
        interval = check_interval(parse_duration(every)) if every is not None else None
    except (InvalidTiming, ValueError) as exc:
        raise invalid(str(exc)) from None
    start_at = _instant(start, zone, "start", invalid)
    end_at = _instant(end, zone, "end", invalid)
    if start_at is not None and end_at is not None and end_at <= start_at:
        raise invalid("end must be after start")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise invalid(f"limit must be a whole number >= 1, not {limit!r}")
    try:
        policy = MisfirePolicy(misfire)
    except ValueError:
        choices = ", ".join(repr(p.value) for p in MisfirePolicy)
        raise invalid(f"misfire must be one of {choices}, not {misfire!r}") from None
    try:
        encoded_payload = serialization.dumps(payload)
        encoded_options = serialization.dumps(_options(options or {}, invalid))
    except ConveyorError as exc:
        raise invalid(str(exc)) from None
    spec = ScheduleSpec(
        name=name,
        task=task_name,
        payload=encoded_payload,
        cron=cron_text,
        every=interval,
        timezone="UTC" if timezone.upper() == "UTC" else timezone,
        start=start_at,
        end=end_at,
        limit=limit,
        misfire=policy,
        options=encoded_options,
    )
    spec.fingerprint = fingerprint(spec)
    return spec


def fingerprint(spec: ScheduleSpec) -> str:
    """A hash of every field of ``spec`` but the fingerprint itself."""
    fields = [
        spec.name,
        spec.task,
        spec.payload.decode(),
        spec.cron,
        spec.every,
        spec.timezone,
        spec.start,
        spec.end,
        spec.limit,
        spec.misfire.value,
        spec.options.decode(),
    ]
    text = json.dumps(fields, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _instant(
    value: datetime | float | None,
    zone: Any,
    field: str,
    invalid: Any,
) -> float | None:
    """POSIX seconds of ``start``/``end``: aware datetimes as they are, naive
    ones in the schedule's time zone, numbers as POSIX seconds."""
    if value is None:
        return None
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=zone)
        return aware.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise invalid(f"{field} must be a datetime or POSIX seconds, not {value!r}")


def _options(options: Mapping[str, Any], invalid: Any) -> dict[str, Any]:
    unknown = sorted(set(options) - SCHEDULE_OPTIONS)
    if unknown:
        allowed = ", ".join(sorted(SCHEDULE_OPTIONS))
        raise invalid(f"unknown option(s) {', '.join(unknown)} (allowed: {allowed})")
    cleaned = {key: value for key, value in options.items() if value is not None}
    for key in _DURATIONS:
        if key in cleaned:
            try:
                cleaned[key] = parse_duration(cleaned[key])
            except ValueError as exc:
                raise invalid(f"{key}: {exc}") from None
    if "metadata" in cleaned and not isinstance(cleaned["metadata"], dict):
        raise invalid("metadata must be a dict")
    for key in ("priority", "attempts"):
        value = cleaned.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise invalid(f"{key} must be a whole number, not {value!r}")
    return cleaned

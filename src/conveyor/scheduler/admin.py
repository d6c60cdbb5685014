"""``app.schedules``: read and change stored schedules (CLI and HTTP API use it).

Every change is persisted in the backend, so it holds for every scheduler and
survives restarts and deploys (until the code changes that schedule's
definition: a new fingerprint replaces it and drops a cron override).
"""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import TYPE_CHECKING

from conveyor import serialization
from conveyor.backends.base import MisfirePolicy, ScheduleRecord
from conveyor.durations import parse_duration
from conveyor.errors import InvalidSchedule, ScheduleNotFound
from conveyor.scheduler.cron import InvalidTiming, check_interval, load_zone, normalize_cron
from conveyor.scheduler.timetable import Timetable, timetable

if TYPE_CHECKING:
    from conveyor.job import Job
    from conveyor.runtime import Runtime


class Schedules:
    """``app.schedules``: list, get, pause, resume, trigger, set_cron, next_fires."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def list(self) -> builtins.list[ScheduleRecord]:
        """Every stored schedule, by name."""
        backend = await self._runtime.connect()
        return await backend.list_schedules()

    async def get(self, name: str) -> ScheduleRecord:
        for record in await self.list():
            if record.name == name:
                return record
        raise ScheduleNotFound(name)

    async def _update(self, name: str, **changes: object) -> ScheduleRecord:
        backend = await self._runtime.connect()
        record = await backend.update_schedule(name, **changes)  # type: ignore[arg-type]
        if record is None:
            raise ScheduleNotFound(name)
        return record

    async def pause(self, name: str) -> ScheduleRecord:
        """Stop firing until ``resume`` (persisted; every scheduler obeys)."""
        return await self._update(name, paused=True)

    async def resume(self, name: str) -> ScheduleRecord:
        """Fire again. Slots that passed while paused follow the misfire policy:
        ``skip`` goes on from the next slot after now; ``run_once`` fires once for
        them (the scheduler sees the old slot due), then goes on from now."""
        record = await self.get(name)
        backend = await self._runtime.connect()
        now = await backend.now()
        upcoming = record.next_fire_at
        if upcoming is not None and upcoming <= now and record.spec.misfire is MisfirePolicy.SKIP:
            upcoming = Timetable.of(record).first(now, record.fires)
        return await self._update(name, paused=False, next_fire_at=upcoming, reschedule=True)

    async def trigger(self, name: str) -> Job:
        """Enqueue one run now, outside the slot sequence: no idempotency key
        (each trigger is a run), not counted in ``fires`` or against ``limit``;
        its metadata says ``{"schedule": name, "trigger": true}``."""
        record = await self.get(name)
        options = dict(serialization.loads(record.spec.options))
        metadata = {**options.pop("metadata", {}), "schedule": name, "trigger": True}
        payload = serialization.loads(record.spec.payload)
        return await self._runtime.enqueue(record.spec.task, payload, metadata=metadata, **options)

    async def set_cron(
        self, name: str, cron: str | None = None, every: float | str | None = None
    ) -> ScheduleRecord:
        """Replace the schedule's cron or interval (a persisted override, kept
        until the code changes the schedule); the next fire is recomputed from now."""
        if (cron is None) == (every is None):
            raise InvalidSchedule(f"schedule {name!r}: give exactly one of cron or every")
        try:
            cron_text = normalize_cron(cron) if cron is not None else None
            interval = check_interval(parse_duration(every)) if every is not None else None
        except (InvalidTiming, ValueError) as exc:
            raise InvalidSchedule(f"schedule {name!r}: {exc}") from None
        record = await self.get(name)
        backend = await self._runtime.connect()
        now = await backend.now()
        upcoming = timetable(record.spec, cron_text, interval).first(now, record.fires)
        return await self._update(
            name, cron=cron_text, every=interval, next_fire_at=upcoming, reschedule=True
        )

    async def next_fires(self, name: str, count: int = 5) -> builtins.list[datetime]:
        """The next ``count`` fire times, in the schedule's time zone (empty once
        finished). For a paused schedule: the slots it would fire if resumed now."""
        record = await self.get(name)
        if record.next_fire_at is None:
            return []
        backend = await self._runtime.connect()
        now = await backend.now()
        table = Timetable.of(record)
        fires = record.fires
        slot = record.next_fire_at if record.next_fire_at > now else table.first(now, fires)
        slots: builtins.list[float] = []
        while slot is not None and len(slots) < count:
            slots.append(slot)
            fires += 1
            slot = table.after_fire(slot, fires)
        zone = load_zone(record.spec.timezone)
        return [datetime.fromtimestamp(slot, zone) for slot in slots]

    async def delete(self, name: str) -> None:
        """Forget a stored schedule (a scheduler whose app declares it stores it again)."""
        backend = await self._runtime.connect()
        if not await backend.delete_schedules([name]):
            raise ScheduleNotFound(name)

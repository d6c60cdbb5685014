"""Schedules in memory: one record per name.

The store's lock is held by the caller around every method; records handed
out are copies, so a caller never changes the store by accident.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from conveyor.backends.base import ScheduleRecord, ScheduleSpec


def _copy(record: ScheduleRecord) -> ScheduleRecord:
    return replace(record, spec=replace(record.spec))


class ScheduleTable:
    def __init__(self) -> None:
        self.records: dict[str, ScheduleRecord] = {}

    def sync(
        self, specs: Sequence[ScheduleSpec], first_fires: Mapping[str, float | None], now: float
    ) -> list[ScheduleRecord]:
        synced: list[ScheduleRecord] = []
        for spec in specs:
            stored = self.records.get(spec.name)
            if stored is None or stored.spec.fingerprint != spec.fingerprint:
                self.records[spec.name] = ScheduleRecord(
                    spec=replace(spec),
                    cron=spec.cron,
                    every=spec.every,
                    paused=stored.paused if stored else False,
                    next_fire_at=first_fires.get(spec.name),
                    fires=stored.fires if stored else 0,
                    last_fire_at=stored.last_fire_at if stored else None,
                    updated_at=now,
                )
            synced.append(_copy(self.records[spec.name]))
        return synced

    def list(self) -> list[ScheduleRecord]:
        return [_copy(record) for _, record in sorted(self.records.items())]

    def update(
        self,
        name: str,
        now: float,
        *,
        paused: bool | None,
        cron: str | None,
        every: float | None,
        next_fire_at: float | None,
        reschedule: bool,
    ) -> ScheduleRecord | None:
        record = self.records.get(name)
        if record is None:
            return None
        if paused is not None:
            record.paused = paused
        if cron is not None or every is not None:
            record.cron, record.every = cron, (None if cron is not None else every)
        if reschedule:
            record.next_fire_at = next_fire_at
        record.updated_at = now
        return _copy(record)

    def advance(
        self, name: str, fired_at: float, next_fire_at: float | None, fired: bool, now: float
    ) -> bool:
        record = self.records.get(name)
        if record is None or record.next_fire_at != fired_at:
            return False
        record.next_fire_at = next_fire_at
        if fired:
            record.fires += 1
            record.last_fire_at = fired_at
        record.updated_at = now
        return True

    def delete(self, names: Sequence[str]) -> int:
        return sum(self.records.pop(name, None) is not None for name in set(names))

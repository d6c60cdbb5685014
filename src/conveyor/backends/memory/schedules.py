"""Schedules in memory: one record per name in ``store.schedules``.

Records handed out are copies, so a caller never changes the store by accident.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from conveyor.backends.base import ScheduleRecord, ScheduleSpec
from conveyor.backends.memory.store import Store


def _copy(record: ScheduleRecord) -> ScheduleRecord:
    return replace(record, spec=replace(record.spec))


def sync_schedules(
    store: Store, specs: Sequence[ScheduleSpec], first_fires: Mapping[str, float | None]
) -> list[ScheduleRecord]:
    now = store.now()
    records = store.schedules
    synced: list[ScheduleRecord] = []
    for spec in specs:
        stored = records.get(spec.name)
        if stored is None or stored.spec.fingerprint != spec.fingerprint:
            records[spec.name] = ScheduleRecord(
                spec=replace(spec),
                cron=spec.cron,
                every=spec.every,
                paused=stored.paused if stored else False,
                next_fire_at=first_fires.get(spec.name),
                fires=stored.fires if stored else 0,
                last_fire_at=stored.last_fire_at if stored else None,
                updated_at=now,
            )
        synced.append(_copy(records[spec.name]))
    return synced


def list_schedules(store: Store) -> list[ScheduleRecord]:
    return [_copy(record) for _, record in sorted(store.schedules.items())]


def update_schedule(
    store: Store,
    name: str,
    *,
    paused: bool | None,
    cron: str | None,
    every: float | None,
    next_fire_at: float | None,
    reschedule: bool,
) -> ScheduleRecord | None:
    now = store.now()
    record = store.schedules.get(name)
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


def advance_schedule(
    store: Store, name: str, fired_at: float, next_fire_at: float | None, *, fired: bool
) -> bool:
    now = store.now()
    record = store.schedules.get(name)
    if record is None or record.next_fire_at != fired_at:
        return False
    record.next_fire_at = next_fire_at
    if fired:
        record.fires += 1
        record.last_fire_at = fired_at
    record.updated_at = now
    return True


def delete_schedules(store: Store, names: Sequence[str]) -> int:
    return sum(store.schedules.pop(name, None) is not None for name in set(names))

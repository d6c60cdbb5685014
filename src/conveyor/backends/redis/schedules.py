"""Schedules: one hash each under the app's schedules key, changed by the
``schedule-*.lua`` scripts; records.py converts them to and from Python.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from conveyor.backends import base
from conveyor.backends.redis import records
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.encode import float_text, opt


async def sync_schedules(
    conn: RedisConnection,
    specs: Sequence[base.ScheduleSpec],
    first_fires: Mapping[str, float | None],
) -> list[base.ScheduleRecord]:
    if not specs:
        conn.ready()
        return []
    argv: list[Any] = []
    for spec in specs:
        argv += (
            spec.name,
            spec.fingerprint,
            records.spec_json(spec),
            opt(spec.cron),
            float_text(spec.every),
            float_text(first_fires.get(spec.name)),
        )
    rows = await conn.run("schedule-sync", [conn.keys.schedules], argv)
    return [records.schedule_from_hash(row) for row in rows]


async def list_schedules(conn: RedisConnection) -> list[base.ScheduleRecord]:
    rows = await conn.run("schedule-read", [conn.keys.schedules], ["list"])
    return sorted((records.schedule_from_hash(row) for row in rows), key=lambda r: r.name)


async def update_schedule(
    conn: RedisConnection,
    name: str,
    *,
    paused: bool | None,
    cron: str | None,
    every: float | None,
    next_fire_at: float | None,
    reschedule: bool,
) -> base.ScheduleRecord | None:
    argv = [
        name,
        "" if paused is None else ("1" if paused else "0"),
        opt(cron),
        float_text(every),
        "1" if reschedule else "0",
        float_text(next_fire_at),
    ]
    row = await conn.run("schedule-update", [conn.keys.schedules], argv)
    return records.schedule_from_hash(row) if row else None


async def advance_schedule(
    conn: RedisConnection, name: str, fired_at: float, next_fire_at: float | None, fired: bool
) -> bool:
    argv = [name, float_text(fired_at), float_text(next_fire_at), "1" if fired else "0"]
    return bool(await conn.run("schedule-advance", [conn.keys.schedules], argv))


async def delete_schedules(conn: RedisConnection, names: Sequence[str]) -> int:
    if not names:
        conn.ready()
        return 0
    argv = ["delete", *dict.fromkeys(names)]
    return int(await conn.run("schedule-read", [conn.keys.schedules], argv))

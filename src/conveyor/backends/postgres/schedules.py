"""Schedules: a small table, plain statements (sync locks its rows in name
order, so concurrent schedulers never deadlock)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from conveyor.backends.base import MisfirePolicy, ScheduleRecord, ScheduleSpec
from conveyor.backends.postgres.connection import Pool
from conveyor.backends.postgres.decode import Row
from conveyor.backends.postgres.queries import Queries
from conveyor.backends.schedulechange import ScheduleChange

_MISFIRE = {m.value: m for m in MisfirePolicy}


def _spec_args(spec: ScheduleSpec, first_fire: float | None) -> tuple[Any, ...]:
    return (
        spec.name,
        spec.task,
        spec.payload,
        spec.cron,
        spec.every,
        spec.timezone,
        spec.start,
        spec.end,
        spec.limit,
        spec.misfire.value,
        spec.options,
        spec.fingerprint,
        first_fire,
    )


def _record(row: Row) -> ScheduleRecord:
    # fmt: off
    (name, task, payload, spec_cron, spec_every, timezone, start, end, limit, misfire, options,
     fingerprint, cron, every, paused, next_fire_at, fires, last_fire_at, updated_at) = row
    # fmt: on
    spec = ScheduleSpec(
        name=name,
        task=task,
        payload=bytes(payload),
        cron=spec_cron,
        every=spec_every,
        timezone=timezone,
        start=start,
        end=end,
        limit=limit,
        misfire=_MISFIRE.get(misfire, MisfirePolicy.SKIP),
        options=bytes(options),
        fingerprint=fingerprint,
    )
    return ScheduleRecord(
        spec=spec,
        cron=cron,
        every=every,
        paused=paused,
        next_fire_at=next_fire_at,
        fires=fires,
        last_fire_at=last_fire_at,
        updated_at=updated_at,
    )


async def sync_schedules(
    pool: Pool,
    q: Queries,
    specs: Sequence[ScheduleSpec],
    first_fires: Mapping[str, float | None],
) -> list[ScheduleRecord]:
    names = [spec.name for spec in specs]
    async with pool.acquire("sync schedules") as conn, conn.transaction():
        # Insert new names (in name order, so concurrent schedulers never
        # deadlock), then lock every row and replace changed definitions.
        for spec in sorted(specs, key=lambda s: s.name):
            await conn.execute(q.insert_schedule, *_spec_args(spec, first_fires.get(spec.name)))
        stored: dict[str, str] = {
            row[0]: row[1] for row in await conn.fetch(q.schedules_for_update, names)
        }
        for spec in specs:
            if stored.get(spec.name) != spec.fingerprint:
                await conn.execute(
                    q.replace_schedule, *_spec_args(spec, first_fires.get(spec.name))
                )
        rows = await conn.fetch(q.schedules_by_name, names)
    records = {row[0]: _record(row) for row in rows}
    return [records[name] for name in names]


async def list_schedules(pool: Pool, q: Queries) -> list[ScheduleRecord]:
    rows = await pool.fetch("list schedules", q.schedules_by_name, None)
    return [_record(row) for row in rows]


async def update_schedule(pool: Pool, q: Queries, change: ScheduleChange) -> ScheduleRecord | None:
    async with pool.acquire("update schedule") as conn:
        changed = await conn.fetch(
            q.update_schedule,
            change.name,
            change.paused,
            change.sets_expression,
            change.cron,
            change.every,
            change.reschedule,
            change.next_fire_at,
        )
        if not changed:
            return None
        rows = await conn.fetch(q.schedules_by_name, [change.name])
    return _record(rows[0]) if rows else None


async def advance_schedule(
    pool: Pool, q: Queries, name: str, fired_at: float, next_fire_at: float | None, fired: bool
) -> bool:
    rows = await pool.fetch(
        "advance schedule", q.advance_schedule, name, fired_at, next_fire_at, fired
    )
    return bool(rows)


async def delete_schedules(pool: Pool, q: Queries, names: Sequence[str]) -> int:
    return int(await pool.fetchval("delete schedules", q.delete_schedules, list(names)))

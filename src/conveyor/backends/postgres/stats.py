"""Schedules and job statistics: small tables, plain statements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from conveyor.backends import base
from conveyor.backends.postgres.connection import Pool
from conveyor.backends.postgres.decode import Row
from conveyor.backends.postgres.queries import Queries

_MISFIRE = {m.value: m for m in base.MisfirePolicy}
_WIDTH = len(base.DURATION_BUCKETS)


def _spec_args(spec: base.ScheduleSpec, first_fire: float | None) -> tuple[Any, ...]:
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


def _record(row: Row) -> base.ScheduleRecord:
    # fmt: off
    (name, task, payload, spec_cron, spec_every, timezone, start, end, limit, misfire, options,
     fingerprint, cron, every, paused, next_fire_at, fires, last_fire_at, updated_at) = row
    # fmt: on
    spec = base.ScheduleSpec(
        name=name,
        task=task,
        payload=bytes(payload),
        cron=spec_cron,
        every=spec_every,
        timezone=timezone,
        start=start,
        end=end,
        limit=limit,
        misfire=_MISFIRE.get(misfire, base.MisfirePolicy.SKIP),
        options=bytes(options),
        fingerprint=fingerprint,
    )
    return base.ScheduleRecord(
        spec=spec,
        cron=cron,
        every=every,
        paused=paused,
        next_fire_at=next_fire_at,
        fires=fires,
        last_fire_at=last_fire_at,
        updated_at=updated_at,
    )


def _stat(row: Row) -> base.JobStat:
    task, queue, status, count, duration_sum, buckets, minute = row
    values = [int(b) for b in buckets][:_WIDTH]
    values += [0] * (_WIDTH - len(values))
    return base.JobStat(task, queue, status, int(count), float(duration_sum), values, minute)


class StatsMixin:
    """Schedule and job-statistics operations of :class:`PostgresBackend`."""

    pool: Pool
    q: Queries

    # -- schedules -----------------------------------------------------------

    async def sync_schedules(
        self, specs: Sequence[base.ScheduleSpec], first_fires: Mapping[str, float | None]
    ) -> list[base.ScheduleRecord]:
        if not specs:
            return []
        names = [spec.name for spec in specs]
        async with self.pool.acquire("sync schedules") as conn, conn.transaction():
            # Insert new names (in name order, so concurrent schedulers never
            # deadlock), then lock every row and replace changed definitions.
            for spec in sorted(specs, key=lambda s: s.name):
                await conn.execute(
                    self.q.insert_schedule, *_spec_args(spec, first_fires.get(spec.name))
                )
            stored: dict[str, str] = {
                row[0]: row[1] for row in await conn.fetch(self.q.schedules_for_update, names)
            }
            for spec in specs:
                if stored.get(spec.name) != spec.fingerprint:
                    await conn.execute(
                        self.q.replace_schedule, *_spec_args(spec, first_fires.get(spec.name))
                    )
            rows = await conn.fetch(self.q.schedules_by_name, names)
        records = {row[0]: _record(row) for row in rows}
        return [records[name] for name in names]

    async def list_schedules(self) -> list[base.ScheduleRecord]:
        rows = await self.pool.fetch("list schedules", self.q.schedules_by_name, None)
        return [_record(row) for row in rows]

    async def update_schedule(
        self,
        name: str,
        *,
        paused: bool | None = None,
        cron: str | None = None,
        every: float | None = None,
        next_fire_at: float | None = None,
        reschedule: bool = False,
    ) -> base.ScheduleRecord | None:
        async with self.pool.acquire("update schedule") as conn:
            changed = await conn.fetch(
                self.q.update_schedule,
                name,
                paused,
                cron is not None or every is not None,
                cron,
                every,
                reschedule,
                next_fire_at,
            )
            if not changed:
                return None
            rows = await conn.fetch(self.q.schedules_by_name, [name])
        return _record(rows[0]) if rows else None

    async def advance_schedule(
        self, name: str, fired_at: float, next_fire_at: float | None, *, fired: bool = True
    ) -> bool:
        rows = await self.pool.fetch(
            "advance schedule", self.q.advance_schedule, name, fired_at, next_fire_at, fired
        )
        return bool(rows)

    async def delete_schedules(self, names: Sequence[str]) -> int:
        if not names:
            return 0
        return int(
            await self.pool.fetchval("delete schedules", self.q.delete_schedules, list(names))
        )

    # -- job statistics ------------------------------------------------------

    async def record_job_stats(self, stats: Sequence[base.JobStat]) -> None:
        merged: dict[tuple[str, str, str], list[Any]] = {}
        for s in stats:
            key = (s.task, s.queue, s.status)
            row = merged.get(key)
            buckets = (list(s.buckets) + [0] * _WIDTH)[:_WIDTH]
            if row is None:
                merged[key] = [s.count, s.duration_sum, buckets]
            else:
                row[0] += s.count
                row[1] += s.duration_sum
                row[2] = [a + b for a, b in zip(row[2], buckets, strict=True)]
        if not merged:
            return
        keys = sorted(merged)
        args = (
            [k[0] for k in keys],
            [k[1] for k in keys],
            [k[2] for k in keys],
            [int(merged[k][0]) for k in keys],
            [float(merged[k][1]) for k in keys],
            [int(b) for k in keys for b in merged[k][2]],
            _WIDTH,
        )
        async with self.pool.acquire("record job stats") as conn, conn.transaction():
            await conn.execute(self.q.add_stat_totals, *args)
            await conn.execute(self.q.add_stat_series, *args)

    async def job_stat_totals(self) -> list[base.JobStat]:
        return [_stat(r) for r in await self.pool.fetch("job stats", self.q.stat_totals)]

    async def job_stat_series(self, since: float) -> list[base.JobStat]:
        rows = await self.pool.fetch("job stats", self.q.stat_series, since)
        return [_stat(r) for r in rows]

    async def prune_job_stats(self, older_than: float) -> int:
        return int(
            await self.pool.fetchval("prune job stats", self.q.prune_stat_series, older_than)
        )

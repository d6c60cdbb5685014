"""Schedules in SQLite (SQL in ``schedules.sql``; table ``schedules``).

Each function is the whole body of one transaction, run in a connection's own
thread: writes under ``BEGIN IMMEDIATE``, so a sync or a compare-and-set
advance from several processes at once is serialised by the write lock.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any, LiteralString

from conveyor.backends.base import MisfirePolicy, ScheduleRecord, ScheduleSpec
from conveyor.backends.namedsql import parse_named_blocks, trusted_sql
from conveyor.backends.schedulechange import ScheduleChange


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleQueries:
    fingerprint_of: LiteralString
    insert_schedule: LiteralString
    replace_definition: LiteralString
    get_schedule: LiteralString
    list_schedules: LiteralString
    set_paused: LiteralString
    set_expression: LiteralString
    set_next_fire: LiteralString
    touch_schedule: LiteralString
    advance_fired: LiteralString
    advance_skipped: LiteralString
    delete_schedule: LiteralString


def _load() -> ScheduleQueries:
    folder = resources.files("conveyor.backends.sqlite")
    blocks = parse_named_blocks(folder.joinpath("schedules.sql").read_text("utf-8"))
    return ScheduleQueries(**{name: trusted_sql(sql) for name, sql in blocks.items()})


SQ = _load()


def _definition(spec: ScheduleSpec, next_fire_at: float | None) -> dict[str, Any]:
    return {
        "name": spec.name,
        "task": spec.task,
        "payload": spec.payload,
        "spec_cron": spec.cron,
        "spec_every": spec.every,
        "timezone": spec.timezone,
        "start_at": spec.start,
        "end_at": spec.end,
        "fire_limit": spec.limit,
        "misfire": spec.misfire.value,
        "options": spec.options,
        "fingerprint": spec.fingerprint,
        "next_fire_at": next_fire_at,
        "now": time.time(),
    }


def _record(row: Sequence[Any]) -> ScheduleRecord:
    (name, task, payload, spec_cron, spec_every, timezone, start, end, limit, misfire) = row[:10]
    (options, fingerprint, cron, every, paused, next_fire, fires, last_fire, updated) = row[10:]
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
        misfire=MisfirePolicy(misfire),
        options=bytes(options),
        fingerprint=fingerprint,
    )
    return ScheduleRecord(
        spec=spec,
        cron=cron,
        every=every,
        paused=bool(paused),
        next_fire_at=next_fire,
        fires=int(fires),
        last_fire_at=last_fire,
        updated_at=float(updated),
    )


def _get(conn: sqlite3.Connection, name: str) -> ScheduleRecord | None:
    row = conn.execute(SQ.get_schedule, {"name": name}).fetchone()
    return _record(row) if row is not None else None


def sync(
    conn: sqlite3.Connection,
    specs: Sequence[ScheduleSpec],
    first_fires: Mapping[str, float | None],
) -> list[ScheduleRecord]:
    synced: list[ScheduleRecord] = []
    for spec in specs:
        stored = conn.execute(SQ.fingerprint_of, {"name": spec.name}).fetchone()
        values = _definition(spec, first_fires.get(spec.name))
        if stored is None:
            conn.execute(SQ.insert_schedule, values)
        elif stored[0] != spec.fingerprint:
            conn.execute(SQ.replace_definition, values)
        record = _get(conn, spec.name)
        assert record is not None  # inserted or found in this transaction
        synced.append(record)
    return synced


def list_all(conn: sqlite3.Connection) -> list[ScheduleRecord]:
    return [_record(row) for row in conn.execute(SQ.list_schedules)]


def update(conn: sqlite3.Connection, change: ScheduleChange) -> ScheduleRecord | None:
    key = {"name": change.name, "now": time.time()}
    if conn.execute(SQ.touch_schedule, key).rowcount == 0:
        return None
    if change.paused is not None:
        conn.execute(SQ.set_paused, {**key, "paused": int(change.paused)})
    if change.sets_expression:
        every = None if change.cron is not None else change.every
        conn.execute(SQ.set_expression, {**key, "cron": change.cron, "every": every})
    if change.reschedule:
        conn.execute(SQ.set_next_fire, {**key, "next_fire_at": change.next_fire_at})
    return _get(conn, change.name)


def advance(
    conn: sqlite3.Connection,
    name: str,
    fired_at: float,
    next_fire_at: float | None,
    fired: bool,
) -> bool:
    values = {"name": name, "fired_at": fired_at, "next_fire_at": next_fire_at}
    statement = SQ.advance_fired if fired else SQ.advance_skipped
    return conn.execute(statement, {**values, "now": time.time()}).rowcount == 1


def delete(conn: sqlite3.Connection, names: Sequence[str]) -> int:
    return sum(conn.execute(SQ.delete_schedule, {"name": n}).rowcount for n in set(names))

"""The SQL side of RabbitMQ dispatch (conveyor.dispatch) on SQLite: what the
relay takes and marks, what the reconciler undispatches, what a broker dead
letter fails, the running totals, and the relay's wake-up. Statements in
dispatch.sql; none of them is on the enqueue/claim path.

SQLite has no NOTIFY: the relay wakes on the backend's commit watch (local
commits, and other processes' through ``PRAGMA data_version``, within ~5 ms),
the same signal a waiting worker claims on."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import LiteralString

from conveyor.backends.dispatchstore import Dispatchable
from conveyor.backends.namedsql import parse_named_blocks, trusted_sql
from conveyor.backends.sqlite.claim import CommitWatch
from conveyor.backends.sqlite.connection import ThreadConnection
from conveyor.backends.sqlite.decode import job_from_row
from conveyor.backends.sqlite.queries import check_job_columns, json_param
from conveyor.job import Job

#: Longest the relay's wake-up waits before it looks anyway.
WAKE_BACKSTOP = 1.0


@functools.cache
def _queries() -> dict[str, LiteralString]:
    text = resources.files("conveyor.backends.sqlite").joinpath("dispatch.sql").read_text("utf-8")
    blocks = parse_named_blocks(text)
    check_job_columns("dispatch.sql", blocks)
    return {name: trusted_sql(sql) for name, sql in blocks.items()}


def _take(conn: sqlite3.Connection, limit: int, age: float) -> list[Dispatchable]:
    params = {"now": time.time(), "limit": limit, "age": age}
    rows = conn.execute(_queries()["take"], params).fetchall()
    rows.sort(key=lambda r: r[4])  # RETURNING comes in no set order: oldest first
    return [Dispatchable(r[0], r[1], r[2], r[3]) for r in rows]


def _untake(conn: sqlite3.Connection, items: str) -> None:
    conn.execute(_queries()["untake"], {"items": items})


def _reconcile(conn: sqlite3.Connection, older_than: float, limit: int) -> int:
    params = {"now": time.time(), "older_than": older_than, "limit": limit}
    return len(conn.execute(_queries()["reconcile"], params).fetchall())


def _expire(conn: sqlite3.Connection, job_id: str, stamp: float, message: str) -> Job | None:
    params = {"id": job_id, "stamp": stamp, "message": message, "now": time.time()}
    row = conn.execute(_queries()["expire"], params).fetchone()
    return job_from_row(row) if row else None


def _scalar(conn: sqlite3.Connection, name: str) -> object:
    row = conn.execute(_queries()[name], {"now": time.time()}).fetchone()
    return row[0] if row else None


def _add_counts(conn: sqlite3.Connection, items: str) -> None:
    conn.execute(_queries()["ensure_counts"])
    conn.execute(_queries()["add_counts"], {"items": items})


def _counts(conn: sqlite3.Connection) -> dict[tuple[str, str], int]:
    if not conn.execute(_queries()["has_counts"]).fetchone()[0]:
        return {}
    return {(r[0], r[1]): int(r[2]) for r in conn.execute(_queries()["counts"])}


class CommitWakeups:
    """The relay's wake-up on SQLite: ``on_wake`` after every commit the
    backend's commit watch sees (or every ``WAKE_BACKSTOP``)."""

    def __init__(self, watch: CommitWatch, on_wake: Callable[[], None]) -> None:
        self.watch = watch
        self.on_wake = on_wake
        self._task: asyncio.Task[None] | None = None

    @property
    def connected(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="conveyor-sqlite-relay-wakeups")

    async def _run(self) -> None:
        while True:
            # No queues: woken by any commit (notify_all), which is what the
            # relay needs, whichever queue the work is for.
            await self.watch.wait((), WAKE_BACKSTOP)
            self.on_wake()

    async def shutdown(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class DispatchStore:
    """The relay's, reconciler's and dead-letter handler's queries on one file."""

    def __init__(
        self, writer: ThreadConnection, reader: ThreadConnection, watch: CommitWatch
    ) -> None:
        self.writer = writer
        self.reader = reader
        self.watch = watch
        self._indexed = False

    async def ensure_index(self) -> None:
        if not self._indexed:
            await self.writer.write(lambda conn: conn.execute(_queries()["ensure_index"]))
            self._indexed = True

    async def take(self, limit: int, min_age: float = 0.0) -> list[Dispatchable]:
        return await self.writer.write(_take, limit, min_age)

    async def untake(self, items: Sequence[Dispatchable]) -> None:
        if items:
            await self.writer.write(_untake, json_param([[i.id, i.stamp] for i in items]))

    async def reconcile(self, older_than: float, limit: int) -> int:
        return await self.writer.write(_reconcile, older_than, limit)

    async def expire(self, job_id: str, stamp: float, message: str) -> Job | None:
        return await self.writer.write(_expire, job_id, stamp, message)

    async def lag(self) -> float:
        return float(await self.reader.read(_scalar, "lag") or 0.0)  # type: ignore[arg-type]

    async def add_counts(self, counts: Mapping[tuple[str, str], int]) -> None:
        if counts:
            items = json_param([[kind, outcome, n] for (kind, outcome), n in counts.items()])
            await self.writer.write(_add_counts, items)

    async def counts(self) -> dict[tuple[str, str], int]:
        return await self.reader.read(_counts)

    async def next_due(self) -> float | None:
        due = await self.reader.read(_scalar, "next_due")
        return float(due) if due is not None else None  # type: ignore[arg-type]

    def wakeups(self, on_wake: Callable[[], None]) -> CommitWakeups:
        return CommitWakeups(self.watch, on_wake)

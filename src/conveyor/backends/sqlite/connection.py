"""One ``sqlite3`` connection owned by one dedicated thread.

Why not aiosqlite: it hops to its thread once per statement, so a claim (promote,
expire, choose, update) would be four or more hops with the write lock held
across the event loop in between. Here each contract operation is ONE plain
synchronous function that runs a whole transaction in the connection's thread,
reached with one ``loop.run_in_executor`` hop. The lock is held only while
SQLite works, and the Python in between runs without any await.

Write transactions start with ``BEGIN IMMEDIATE``: the write lock is taken up
front, so ``busy_timeout`` applies and no read-to-write upgrade can deadlock.
On top of SQLite's own busy handler, SQLITE_BUSY/SQLITE_LOCKED is retried with
short jittered sleeps until ``busy_timeout`` has passed, then it becomes
:class:`BackendUnavailable`: "database is locked" never reaches a caller.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, LiteralString, TypeVar, TypeVarTuple

from conveyor.backends.sqlite.queries import P
from conveyor.backends.sqlite.url import SQLiteOptions
from conveyor.errors import BackendError, BackendUnavailable

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

# Result codes (the low byte of an extended code).
_BUSY_CODES = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED
_UNAVAILABLE_CODES = frozenset({8, 10, 13, 14, 15})  # READONLY IOERR FULL CANTOPEN PROTOCOL

#: Storage faults, with what to tell the caller (SQLITE_FULL, SQLITE_READONLY).
_STORAGE_FAULTS = {
    13: "is on a full disk (SQLITE_FULL)",
    8: "is read-only (SQLITE_READONLY: file permissions or a read-only mount)",
}

MIN_SQLITE = (3, 35, 0)  # RETURNING


def is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return (code & 0xFF) in _BUSY_CODES
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def translate(exc: sqlite3.Error, path: object) -> BackendError:
    """A typed conveyor error for a SQLite error (the cause stays chained)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if is_busy(exc):
        return BackendUnavailable(
            f"SQLite database {path} stayed busy (another connection held its write lock) "
            "past busy_timeout; retry later"
        )
    primary = code & 0xFF if isinstance(code, int) else None
    if primary in _STORAGE_FAULTS:  # the transaction rolled back: nothing was stored
        return BackendUnavailable(
            f"SQLite database {path} {_STORAGE_FAULTS[primary]}: nothing was written; "
            "retry once the fault clears"
        )
    if primary in _UNAVAILABLE_CODES:
        return BackendUnavailable(f"SQLite database {path} is unavailable: {exc}")
    return BackendError(f"SQLite error on {path}: {exc}")


def _create_private(path: Path, mode: int) -> None:
    """Create the database file with ``mode`` before SQLite does (it would use
    0644 less the umask); SQLite gives the -wal and -shm files the database
    file's mode. An existing file keeps its mode."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return
    except OSError as exc:
        raise BackendUnavailable(f"cannot create {path}: {exc}") from exc
    try:
        os.fchmod(fd, mode)  # exactly ``mode``, whatever the umask
    finally:
        os.close(fd)


class _Op:
    """One queued call: ``inner(*args)`` in the thread, its result set on ``future``."""

    __slots__ = ("args", "future", "inner", "is_write", "loop")

    def __init__(
        self,
        inner: Callable[..., object],
        args: tuple[object, ...],
        future: asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop,
        is_write: bool,
    ) -> None:
        self.inner = inner
        self.is_write = is_write
        self.args = args
        self.future = future
        self.loop = loop


_STOP = object()
#: Most write transactions committed together in one group.
GROUP_MAX = 32


class ThreadConnection:
    """A connection plus the single thread that owns it.

    ``write(fn, ...)`` runs ``fn(conn, ...)`` inside ``BEGIN IMMEDIATE`` ...
    ``COMMIT``; ``read(fn, ...)`` inside a deferred ``BEGIN`` (one consistent
    snapshot); ``call(fn, ...)`` without a transaction. A busy database is
    retried as a whole transaction, so ``fn`` must not keep state between runs.

    Group commit: write transactions that queue up while the thread is busy
    run together in ONE transaction, each inside its own savepoint (so one
    that fails is rolled back alone), and their results reach the event loop
    in one wake-up. A worker's settle and its next claim, issued together,
    cost one commit and one thread hand-off instead of two.
    """

    def __init__(
        self,
        options: SQLiteOptions,
        role: str,
        *,
        tune: bool = True,
        pragmas: tuple[LiteralString, ...] = (),  # a block of pragmas.sql, after tuning
        after_commit: Callable[[sqlite3.Connection], None] | None = None,
    ) -> None:
        self.options = options
        self.role = role
        self._tune = tune
        self._pragmas = pragmas
        self._after_commit = after_commit
        self._queue: collections.deque[_Op | object] = collections.deque()
        self._ready = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None

    @property
    def is_open(self) -> bool:
        return self._thread is not None

    async def open(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._serve, name=f"conveyor-sqlite-{self.role}", daemon=True
        )
        self._thread.start()
        try:
            await self._submit(self._connect, ())  # connects in the thread it belongs to
        except BaseException:
            self._stop_thread()
            raise

    async def close(self) -> None:
        if self._thread is None:
            return
        try:
            await self._submit(self._disconnect, ())
        finally:
            self._stop_thread()

    def _stop_thread(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            with self._ready:
                self._queue.append(_STOP)
                self._ready.notify()

    async def write(self, fn: Callable[[sqlite3.Connection, *Ts], T], *args: *Ts) -> T:
        return await self.start_write(fn, *args)

    async def read(self, fn: Callable[[sqlite3.Connection, *Ts], T], *args: *Ts) -> T:
        return await self._submit(self._in_transaction, ("BEGIN", fn, args))

    async def call(self, fn: Callable[[sqlite3.Connection, *Ts], T], *args: *Ts) -> T:
        return await self._submit(self._plain, (fn, args))

    def start_write(
        self, fn: Callable[[sqlite3.Connection, *Ts], T], *args: *Ts
    ) -> asyncio.Future[T]:
        """Queue a write transaction; the future completes once it committed
        (or failed). Cancelling the future does not stop a transaction that has
        already started: see ``SQLiteBackend.claim_jobs``."""
        return self._submit(fn, args, is_write=True)

    def _submit(
        self, inner: Callable[..., T], args: tuple[object, ...], *, is_write: bool = False
    ) -> asyncio.Future[T]:
        """Queue ``inner(*args)`` (for a write: ``inner(conn, *args)`` in a group)."""
        if self._thread is None:
            raise BackendUnavailable(f"the SQLite backend for {self.options.path} is not open")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._ready:
            self._queue.append(_Op(inner, args, future, loop, is_write))
            self._ready.notify()
        return future

    # -- in the connection's thread -------------------------------------------

    def _serve(self) -> None:
        queue = self._queue
        while True:
            with self._ready:
                while not queue:
                    self._ready.wait()
                first = queue.popleft()
                if first is _STOP:
                    return
                assert isinstance(first, _Op)
                batch = [first]
                if first.is_write:
                    # Everything else already queued for writing joins this group.
                    while queue and len(batch) < GROUP_MAX:
                        nxt = queue[0]
                        if not isinstance(nxt, _Op) or not nxt.is_write:
                            break
                        queue.popleft()
                        batch.append(nxt)
            live = [op for op in batch if not op.future.cancelled()]
            if not live:
                continue
            if first.is_write:
                try:
                    outcomes = self._guard(self._write_group, (live,))
                except BaseException as exc:  # the group as a whole failed
                    outcomes = [(False, exc)] * len(live)
            else:
                outcomes = [self._run_one(live[0])]
            self._deliver(live, outcomes)

    def _run_one(self, op: _Op) -> tuple[bool, object]:
        try:
            return True, self._guard(op.inner, op.args)
        except BaseException as exc:
            return False, exc

    @staticmethod
    def _deliver(ops: list[_Op], outcomes: list[tuple[bool, object]]) -> None:
        """Hand results to each op's loop: one wake-up per loop, not per op."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Op, tuple[bool, object]]]] = {}
        for op, outcome in zip(ops, outcomes, strict=True):
            by_loop.setdefault(op.loop, []).append((op, outcome))
        for loop, items in by_loop.items():
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(_resolve, items)

    def _guard(self, inner: Callable[..., T], args: tuple[object, ...]) -> T:
        """Run ``inner(*args)``, retrying busy errors until ``busy_timeout``."""
        deadline = time.monotonic() + self.options.busy_timeout
        pause = 0.001
        while True:
            try:
                return inner(*args)
            except sqlite3.Error as exc:
                if is_busy(exc) and time.monotonic() < deadline:
                    left = deadline - time.monotonic()
                    time.sleep(max(0.0, min(left, pause * (0.5 + random.random()))))
                    pause = min(pause * 2, 0.05)
                    continue
                raise translate(exc, self.options.path) from exc

    def _connection(self) -> sqlite3.Connection:
        conn = self._conn
        if conn is None:
            raise BackendUnavailable(f"the SQLite backend for {self.options.path} is not open")
        return conn

    def _write_group(self, ops: list[_Op]) -> list[tuple[bool, object]]:
        """One ``BEGIN IMMEDIATE`` ... ``COMMIT`` around every op of the group.

        Each op runs in its own savepoint: one that raises is rolled back alone
        and gets its exception; a busy error anywhere retries the whole group.
        """
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        outcomes: list[tuple[bool, object]] = []
        try:
            for op in ops:
                conn.execute("SAVEPOINT op")
                try:
                    result = op.inner(conn, *op.args)
                except sqlite3.Error as exc:
                    if is_busy(exc):
                        raise
                    conn.execute("ROLLBACK TO op")
                    outcomes.append((False, translate(exc, self.options.path)))
                except Exception as exc:
                    conn.execute("ROLLBACK TO op")
                    outcomes.append((False, exc))
                else:
                    outcomes.append((True, result))
                conn.execute("RELEASE op")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # the connection is gone
                    conn.execute("ROLLBACK")
            raise
        if self._after_commit is not None:
            self._after_commit(conn)
        return outcomes

    def _in_transaction(
        self,
        begin: LiteralString,
        fn: Callable[..., T],
        args: tuple[object, ...],
    ) -> T:
        conn = self._connection()
        conn.execute(begin)
        try:
            result = fn(conn, *args)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # the connection is gone
                    conn.execute("ROLLBACK")
            raise
        return result

    def _plain(self, fn: Callable[..., T], args: tuple[object, ...]) -> T:
        return fn(self._connection(), *args)

    def _connect(self) -> None:
        if self._conn is not None:
            return
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise BackendError(
                f"the SQLite backend needs SQLite {'.'.join(map(str, MIN_SQLITE))}+ "
                f"(this Python has {sqlite3.sqlite_version})"
            )
        try:
            self.options.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BackendUnavailable(
                f"cannot create the folder of {self.options.path}: {exc}"
            ) from exc
        _create_private(self.options.path, self.options.file_mode)
        conn = sqlite3.connect(
            self.options.path,
            timeout=self.options.busy_timeout,  # sets SQLite's busy_timeout
            isolation_level=None,  # autocommit; every transaction is explicit
            check_same_thread=True,  # this connection belongs to this thread only
            cached_statements=256,
        )
        try:
            if self._tune:
                (journal_wal,) = P.journal_wal
                mode = conn.execute(journal_wal).fetchone()
                if not mode or str(mode[0]).lower() != "wal":
                    raise BackendError(
                        f"could not put {self.options.path} in WAL mode (got {mode!r})"
                    )
                # pragmas.sql: the URL's synchronous level, then the tuning blocks
                for pragma in (
                    *P.synchronous(self.options.synchronous),
                    *P.tuning,
                    *self._pragmas,
                ):
                    conn.execute(pragma)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _resolve(items: list[tuple[_Op, tuple[bool, object]]]) -> None:
    for op, (ok, value) in items:
        if op.future.cancelled():
            continue
        if ok:
            op.future.set_result(value)
        else:
            op.future.set_exception(value)  # type: ignore[arg-type]

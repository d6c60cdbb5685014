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
import contextlib
import random
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import LiteralString, TypeVar, TypeVarTuple

from conveyor.backends.sqlite.url import SQLiteOptions
from conveyor.errors import BackendError, BackendUnavailable

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

# Result codes (the low byte of an extended code).
_BUSY_CODES = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED
_UNAVAILABLE_CODES = frozenset({8, 10, 13, 14, 15})  # READONLY IOERR FULL CANTOPEN PROTOCOL

# Fixed statements for each synchronous level (PRAGMA values cannot be bound).
_SYNCHRONOUS: dict[str, LiteralString] = {
    "OFF": "PRAGMA synchronous = OFF",
    "NORMAL": "PRAGMA synchronous = NORMAL",
    "FULL": "PRAGMA synchronous = FULL",
    "EXTRA": "PRAGMA synchronous = EXTRA",
}
_TUNING: tuple[LiteralString, ...] = (
    "PRAGMA foreign_keys = OFF",
    "PRAGMA temp_store = MEMORY",
    "PRAGMA cache_size = -32768",  # 32 MiB of page cache per connection
    "PRAGMA mmap_size = 268435456",  # read through a 256 MiB memory map
    "PRAGMA journal_size_limit = 67108864",  # truncate the WAL back to 64 MiB
)

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
    if isinstance(code, int) and (code & 0xFF) in _UNAVAILABLE_CODES:
        return BackendUnavailable(f"SQLite database {path} is unavailable: {exc}")
    return BackendError(f"SQLite error on {path}: {exc}")


class ThreadConnection:
    """A connection plus the single thread that owns it.

    ``write(fn, ...)`` runs ``fn(conn, ...)`` inside ``BEGIN IMMEDIATE`` ...
    ``COMMIT``; ``read(fn, ...)`` inside a deferred ``BEGIN`` (one consistent
    snapshot); ``call(fn, ...)`` without a transaction. A busy database is
    retried as a whole transaction, so ``fn`` must not keep state between runs.
    """

    def __init__(self, options: SQLiteOptions, role: str, *, tune: bool = True) -> None:
        self.options = options
        self.role = role
        self._tune = tune
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None

    @property
    def is_open(self) -> bool:
        return self._executor is not None

    async def open(self) -> None:
        if self._executor is not None:
            return
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"conveyor-sqlite-{self.role}")
        try:
            await self._submit(self._connect, ())  # connects in the thread it belongs to
        except BaseException:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        try:
            await asyncio.get_running_loop().run_in_executor(executor, self._disconnect)
        finally:
            executor.shutdown(wait=False)

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
        return self._submit(self._in_transaction, ("BEGIN IMMEDIATE", fn, args))

    # -- in the connection's thread -------------------------------------------

    def _submit(self, inner: Callable[..., T], args: tuple[object, ...]) -> asyncio.Future[T]:
        executor = self._executor
        if executor is None:
            raise BackendUnavailable(f"the SQLite backend for {self.options.path} is not open")
        loop = asyncio.get_running_loop()
        try:
            return loop.run_in_executor(executor, self._guard, inner, args)
        except RuntimeError as exc:
            if "shutdown" in str(exc):  # the executor closed under us
                raise BackendUnavailable(
                    f"the SQLite backend for {self.options.path} is not open"
                ) from exc
            raise

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
        conn = sqlite3.connect(
            self.options.path,
            timeout=self.options.busy_timeout,  # sets SQLite's busy_timeout
            isolation_level=None,  # autocommit; every transaction is explicit
            check_same_thread=True,  # this connection belongs to this thread only
            cached_statements=256,
        )
        try:
            if self._tune:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
                if not mode or str(mode[0]).lower() != "wal":
                    raise BackendError(
                        f"could not put {self.options.path} in WAL mode (got {mode!r})"
                    )
                conn.execute(_SYNCHRONOUS[self.options.synchronous])
                for pragma in _TUNING:
                    conn.execute(pragma)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

"""The connection pool, and every driver error turned into a typed one.

asyncpg's pool replaces a connection that broke (server restart, network
cut) on the next acquire, so producers and workers reconnect by themselves.
Meanwhile nothing hangs: acquiring waits at most ``connect_timeout`` and any
statement at most ``command_timeout``; both, and every connection failure,
surface as :class:`BackendUnavailable`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, LiteralString, NoReturn

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from conveyor.backends.postgres.url import PostgresOptions
from conveyor.errors import BackendError, BackendUnavailable, InvalidWorkflow, QueueFull

#: Errors that mean "the server cannot be reached right now".
UNAVAILABLE: tuple[type[Exception], ...] = (
    OSError,
    TimeoutError,
    asyncio.TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,  # 57P01 admin shutdown, 57P03 starting up
    asyncpg.exceptions.InsufficientResourcesError,  # 53xxx too many connections
    # "another operation is in progress": a connection whose session the server
    # ended (pg_terminate_backend, a restart) was lent before its end was read.
    asyncpg.InternalClientError,
)

#: Errors after which a connection must not be lent again: its protocol state
#: is unknown, or its session is read-only for good (default_transaction_read_only
#: is read once, at connect: only a new session sees the database writable again).
SPOILED: tuple[type[Exception], ...] = (
    asyncpg.InternalClientError,
    asyncpg.ReadOnlySQLTransactionError,
)

#: Connections opened (and warmed) up front: a worker's claim loop, its
#: settlements, lease renewals and heartbeats each find one ready.
WARM_CONNECTIONS = 6

DRIVER_ERRORS: tuple[type[Exception], ...] = (asyncpg.PostgresError, *UNAVAILABLE)

#: A connection of ours: a plain one, or one lent by the pool.
Conn = asyncpg.Connection | PoolConnectionProxy

#: Settings for every pooled connection: no JIT (it only adds latency to these
#: short statements), and a name that shows in pg_stat_activity.
SERVER_SETTINGS = {"jit": "off", "application_name": "conveyor"}


#: The SQLSTATE the enqueue function raises for a full queue (detail: queue, hint: max_size).
QUEUE_FULL = "CVQFL"


def queue_full(sqlstate: str | None, detail: str | None, hint: str | None) -> QueueFull | None:
    """The typed error for the enqueue function's full-queue exception, else None."""
    if sqlstate != QUEUE_FULL:
        return None
    try:
        max_size = int(hint or 0)
    except ValueError:
        max_size = 0
    return QueueFull(detail or "", max_size)


#: The SQLSTATE the enqueue function raises for a dependency that does not exist.
UNKNOWN_DEPENDENCY = "CVDEP"


def enqueue_refusal(
    sqlstate: str | None, message: str | None, detail: str | None, hint: str | None
) -> QueueFull | InvalidWorkflow | None:
    """The typed error for an exception the enqueue function raises on
    purpose (a full queue, an unknown dependency), else None."""
    if sqlstate == UNKNOWN_DEPENDENCY:
        return InvalidWorkflow(message or f"unknown dependency {detail}")
    return queue_full(sqlstate, detail, hint)


def raise_typed(exc: BaseException, what: str) -> NoReturn:
    """Re-raise a driver error as conveyor's typed error."""
    if isinstance(exc, asyncpg.PostgresError):
        refusal = enqueue_refusal(
            exc.sqlstate,
            getattr(exc, "message", None),
            getattr(exc, "detail", None),
            getattr(exc, "hint", None),
        )
        if refusal is not None:
            raise refusal from None
    if isinstance(exc, asyncpg.ReadOnlySQLTransactionError):  # 25006: nothing was written
        raise BackendUnavailable(
            f"PostgreSQL is read-only ({what}): {exc}; nothing was written "
            "(default_transaction_read_only, or a standby); retry once it accepts writes"
        ) from exc
    if isinstance(exc, UNAVAILABLE) and not isinstance(exc, asyncpg.DataError):
        raise BackendUnavailable(f"PostgreSQL unavailable ({what}): {exc!r}") from exc
    raise BackendError(f"PostgreSQL error ({what}): {exc}") from exc


def spoiled(exc: BaseException) -> bool:
    """True when ``exc``, or the driver error it was raised from, is :data:`SPOILED`."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, SPOILED):
            return True
        seen = seen.__cause__
    return False


async def _reset(conn: Conn) -> None:
    """Make a returned connection clean for the next user. asyncpg's default
    (UNLISTEN *, RESET ALL, ...) costs a round trip per use; this backend never
    leaves session state behind (LISTEN runs on its own connection, locks are
    transaction-scoped), so only an unfinished transaction needs undoing."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


class Pool:
    """A lazily created asyncpg pool with typed errors and bounded waits."""

    def __init__(self, options: PostgresOptions) -> None:
        self.options = options
        self._pool: asyncpg.Pool | None = None
        self.warm_up: list[LiteralString] = []
        """Statements each new connection runs once (set after migrating)."""

    async def warm(self, conn: Conn) -> None:
        """Compile the server-side functions on a fresh connection, so the first
        claim or settlement on it does not pay tens of milliseconds for that.
        Rolled back: the compiled functions stay, whatever the calls did (a
        claim may expire or promote jobs) does not happen outside a real claim."""
        if not self.warm_up:
            return
        transaction = conn.transaction()
        await transaction.start()
        try:
            for sql in self.warm_up:
                await conn.fetch(sql)
        except asyncpg.ReadOnlySQLTransactionError:
            # A read-only database (a standby, default_transaction_read_only)
            # refuses the warm-up's writes: the connection is fine for reads,
            # and writes get their typed error when they are made.
            pass
        finally:
            await transaction.rollback()

    @property
    def is_open(self) -> bool:
        return self._pool is not None

    async def open(self) -> None:
        if self._pool is not None:
            return
        o = self.options
        try:
            self._pool = await asyncpg.create_pool(
                o.dsn,
                min_size=min(WARM_CONNECTIONS, o.pool_size),
                max_size=o.pool_size,
                timeout=o.connect_timeout,
                command_timeout=o.command_timeout,
                statement_cache_size=256,
                max_inactive_connection_lifetime=60.0,
                server_settings=SERVER_SETTINGS,
                init=self.warm,
                reset=_reset,
            )
        except Exception as exc:
            raise_typed(exc, "connect")

    async def warm_all(self) -> None:
        """Warm the connections opened before the schema existed."""
        pool = self._pool
        if pool is None:
            return
        count = min(WARM_CONNECTIONS, self.options.pool_size)
        held = [await pool.acquire(timeout=self.options.connect_timeout) for _ in range(count)]
        try:
            # Every warm-up finishes before any connection goes back: released
            # mid-statement, a connection would fail its next user with
            # "another operation is in progress".
            outcomes = await asyncio.gather(
                *(self.warm(conn) for conn in held), return_exceptions=True
            )
        finally:
            for conn in held:
                await pool.release(conn)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), timeout=5)
            except (TimeoutError, Exception):
                pool.terminate()

    @asynccontextmanager
    async def acquire(self, what: str) -> AsyncIterator[Conn]:
        pool = self._pool
        if pool is None:
            raise BackendError("the PostgreSQL backend is not open")
        try:
            async with pool.acquire(timeout=self.options.connect_timeout) as conn:
                try:
                    yield conn
                except BaseException as exc:
                    if spoiled(exc):
                        conn.terminate()  # the pool opens a new session in its place
                    raise
        except Exception as exc:
            if isinstance(exc, DRIVER_ERRORS):
                raise_typed(exc, what)
            raise

    async def fetch(self, what: str, sql: LiteralString, *args: Any) -> list[asyncpg.Record]:
        async with self.acquire(what) as conn:
            rows: list[asyncpg.Record] = await conn.fetch(sql, *args)
            return rows

    async def fetchval(self, what: str, sql: LiteralString, *args: Any) -> Any:
        async with self.acquire(what) as conn:
            return await conn.fetchval(sql, *args)

    async def execute(self, what: str, sql: LiteralString, *args: Any) -> None:
        async with self.acquire(what) as conn:
            await conn.execute(sql, *args)

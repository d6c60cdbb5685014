"""LISTEN/NOTIFY wake-ups for ``wait_for_work``, with polling as the fallback.

Every statement that makes work available (enqueue, a retry or release in a
settlement, a dead-letter retry, resuming a queue) calls ``pg_notify`` once
per queue it touched, not once per job; PostgreSQL also folds identical
notifications of one transaction into one, and delivers them only at commit.

One :class:`Listener` per backend holds a dedicated connection (outside the
pool) that LISTENs on the schema's channel and wakes the waiters on that
queue. A notification for a queue nobody waits on right now is kept as
pending, so a worker between a claim and its next wait does not miss it.
When the connection drops, everyone is woken (their next claim looks for
work, or reports the outage), and it reconnects in the background; until it
does, waits simply run to their timeout, which the worker keeps short: that
is the polling fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg

from conveyor.backends.worksignal import WorkSignal

logger = logging.getLogger("conveyor.backends.postgres")

#: Pause between reconnection attempts of the listening connection.
RECONNECT_DELAY = 0.5


class Listener(WorkSignal):
    """Waiters by queue set, woken by notifications. Used from one event loop."""

    def __init__(self, dsn: str, channel: str, connect_timeout: float) -> None:
        super().__init__()
        self._dsn = dsn
        self._channel = channel
        self._connect_timeout = connect_timeout
        self._conn: asyncpg.Connection | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._lost: asyncio.Event | None = None
        self._closed = False

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def start(self) -> None:
        """Connect and LISTEN now (so a wake-up right after open is not lost),
        then keep the connection up in the background."""
        self._closed = False
        self._lost = asyncio.Event()
        await self._connect()
        self._keeper = asyncio.get_running_loop().create_task(
            self._keep_connected(), name="conveyor-postgres-listen"
        )

    async def _connect(self) -> None:
        conn = await asyncpg.connect(
            self._dsn, timeout=self._connect_timeout, statement_cache_size=0
        )
        try:
            await conn.add_listener(self._channel, self._on_notify)
        except BaseException:
            await conn.close(timeout=1)
            raise
        conn.add_termination_listener(self._on_terminated)
        self._conn = conn

    async def _keep_connected(self) -> None:
        assert self._lost is not None
        while not self._closed:
            await self._lost.wait()
            if self._closed:
                return
            self._lost.clear()
            self.notify_all()  # lost notifications: everyone looks again
            while not self._closed:
                try:
                    await self._connect()
                    self.notify_all()  # whatever arrived while we were away
                    break
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
                    await asyncio.sleep(RECONNECT_DELAY)

    def _on_terminated(self, conn: Any) -> None:
        if self._conn is conn:
            self._conn = None
        if self._lost is not None:
            self._lost.set()

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: object) -> None:
        self.notify([str(payload)])

    async def shutdown(self) -> None:
        """Stop listening and wake every waiter."""
        self._closed = True
        if self._lost is not None:
            self._lost.set()
        keeper, self._keeper = self._keeper, None
        if keeper is not None and not keeper.done():
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await keeper
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)
        self.close()

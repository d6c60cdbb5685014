"""Hot-path commands on connections of our own, past redis-py's client layer.

redis-py 8's asyncio client wraps every command in a pool lock, a check for
unread data on the connection, observability hooks and a retry wrapper: tens
of µs of client CPU per call, most of it before the command is sent, which is
what an enqueue's pickup latency waits on. Scripts (standalone servers) and the
handoff inbox's pop run here instead, on redis-py ``Connection`` objects made
by the client's own pool factory: the same protocol, hiredis parser, TLS,
credentials and database. A cluster client routes by slot and keeps redis-py's
path for scripts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

#: A failed send or read: the connection is dead (a server restart, a closed socket).
_BROKEN = (RedisConnectionError, RedisTimeoutError, OSError)


class DirectConnections:
    """Idle connections in a list; a call takes one, or makes one, and gives it back.

    At most ``limit`` connections (the URL's ``max_connections``, else redis-py's
    default pool size): calls beyond it wait for one. A call on an idle
    connection that turns out dead (the server restarted since it was last used)
    is sent once more, at once, on a new connection, and the other idle ones are
    dropped; a new connection that fails raises. A call cancelled or failed
    midway closes its connection, whose replies may be unread; ``close`` closes
    the connections in use too.
    """

    def __init__(self, make: Callable[[], AbstractConnection], limit: int) -> None:
        self._make = make
        self._idle: list[AbstractConnection] = []
        self._busy: set[AbstractConnection] = set()
        self._closed = False
        self._slots = asyncio.Semaphore(limit)

    async def execute(self, *args: Any) -> Any:
        """One command's reply; an error reply raises its ``ResponseError``."""
        return (await self.pipeline([args]))[0]

    async def pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send ``commands`` in one write and read a reply for each. An error reply
        raises, once every reply is read (the connection stays usable)."""
        replies = await self.replies(commands)
        for reply in replies:
            if isinstance(reply, ResponseError):
                raise reply
        return replies

    async def replies(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """:meth:`pipeline` with error replies returned in place (``ResponseError``)."""
        async with self._slots:
            return await self._pipeline(commands)

    async def _pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        reused = bool(self._idle)
        connection = self._idle.pop() if reused else self._make()
        while True:
            self._busy.add(connection)
            try:
                replies = await _round_trip(connection, commands)
                break
            except _BROKEN:
                await self._close(connection)
                if not reused or self._closed:
                    raise
                # A restart killed the idle connections: once more, on a new one.
                await self.drop_idle()
                connection, reused = self._make(), False
            except BaseException:
                await self._close(connection)
                raise
        self._busy.discard(connection)
        if self._closed:
            await _close(connection)
        else:
            self._idle.append(connection)
        return replies

    async def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        return await self.execute("EVALSHA", sha, numkeys, *keys_and_args)

    async def script_load(self, script: str) -> Any:
        return await self.execute("SCRIPT", "LOAD", script)

    async def drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            await _close(connection)

    async def close(self) -> None:
        """Close every connection: idle ones, and those of calls in flight (the
        calls fail)."""
        self._closed = True
        await self.drop_idle()
        busy, self._busy = self._busy, set()
        for connection in busy:
            await _close(connection)

    async def _close(self, connection: AbstractConnection) -> None:
        self._busy.discard(connection)
        await _close(connection)


async def _round_trip(
    connection: AbstractConnection, commands: Sequence[Sequence[Any]]
) -> list[Any]:
    packed = (
        connection.pack_command(*commands[0])
        if len(commands) == 1
        else connection.pack_commands(commands)
    )
    await connection.send_packed_command(packed, check_health=False)
    replies: list[Any] = []
    for _ in commands:
        try:
            replies.append(await connection.read_response())
        except ResponseError as exc:
            replies.append(exc)
    return replies


async def _close(connection: AbstractConnection) -> None:
    with contextlib.suppress(Exception):
        await connection.disconnect(nowait=True)

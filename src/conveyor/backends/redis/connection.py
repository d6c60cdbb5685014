"""Connecting to Redis: the connection class, the clients, and every redis-py
error turned into a typed one.

This is the backend layout's ``connection.py`` (the same name in every
backend); it also keeps the hiredis packing connection classes, since they are
part of the same setup: every client and pool made here uses them.

- :class:`FastPackConnection` packs commands with hiredis (C) instead of
  redis-py's Python. redis-py's sync client already packs with
  ``hiredis.pack_command``; its asyncio client does not, and a 1,000-job
  enqueue script call has 15,000 arguments, so packing them in Python cost more
  than running the script. The wire format is the same RESP either way.
- :class:`RedisConnection` is what every area module (enqueue.py, claim.py, ...)
  is handed: one redis-py asyncio client (a cluster client when the URL says
  ``cluster=true``), the script runner, the scripts' own connections on a
  standalone server (direct.py) and the wake-up listener (wakeup.py).
- Network trouble becomes :class:`BackendUnavailable` within the socket
  timeouts, never a hang; the pool reconnects by itself, and a script the
  server forgot (restart, failover) is loaded again (scripts.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection, SSLConnection
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from conveyor.backends.redis import safety
from conveyor.backends.redis.direct import DirectConnections
from conveyor.backends.redis.keys import Keys
from conveyor.backends.redis.scripts import ScriptRunner
from conveyor.backends.redis.url import RedisOptions
from conveyor.backends.redis.wakeup import WakeListener
from conveyor.errors import BackendError, BackendUnavailable

_UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)


# -- hiredis packing -------------------------------------------------------------------


def _pack(args: tuple[Any, ...]) -> list[bytes]:
    first = args[0]
    # redis-py accepts "CONFIG GET" as one argument; the server wants two.
    if isinstance(first, str) and " " in first:
        args = (*first.split(), *args[1:])
    try:
        return [hiredis.pack_command(args)]
    except TypeError:
        # hiredis takes str, int, float and bytes only.
        plain: Any = tuple(_plain(arg) for arg in args)
        return [hiredis.pack_command(plain)]


def _plain(arg: Any) -> str | int | float | bytes:
    if isinstance(arg, bytearray | memoryview):
        return bytes(arg)
    if isinstance(arg, bool) or not isinstance(arg, str | int | float | bytes):
        raise DataError(f"invalid input of type {type(arg).__name__} for a Redis command")
    return arg


class FastPackConnection(Connection):
    def pack_command(self, *args: Any) -> list[bytes]:
        return _pack(args)


class FastPackSSLConnection(SSLConnection):
    def pack_command(self, *args: Any) -> list[bytes]:
        return _pack(args)


# -- the backend's connection ----------------------------------------------------------


class RedisConnection:
    """The clients of one backend instance, open between :meth:`open` and :meth:`close`."""

    def __init__(self, options: RedisOptions, keys: Keys, name: str) -> None:
        self.options = options
        #: How errors name the backend (its repr).
        self.name = name
        self.keys = keys
        self.client: Any = None
        self.runner: ScriptRunner | None = None
        #: Scripts' connections on a standalone server (direct.py); None on a cluster.
        self.direct: DirectConnections | None = None
        self.wake: WakeListener | None = None

    def _client_kwargs(self) -> dict[str, Any]:
        return {
            # No socket timeout in redis-py: with one, redis-py 8 on Python 3.11 can
            # swallow a task's cancellation. Each call is bounded by errors() instead.
            "socket_timeout": None,
            "socket_connect_timeout": self.options.connect_timeout,
            "socket_keepalive": True,
            # One quick retry on a fresh connection: after a server restart every
            # pooled connection is dead, and the first use of each would fail.
            "retry": Retry(ExponentialBackoff(cap=0.1, base=0.02), 1),
            "decode_responses": False,
        }

    def _connection_class(self) -> type[FastPackConnection | FastPackSSLConnection]:
        secure = self.options.client_url.startswith("rediss:")
        return FastPackSSLConnection if secure else FastPackConnection

    def _make_client(self) -> Any:
        kwargs = self._client_kwargs()
        kwargs["connection_class"] = self._connection_class()
        if self.options.cluster:
            kwargs.pop("retry")
            return RedisCluster.from_url(self.options.client_url, **kwargs)
        return aioredis.Redis.from_url(self.options.client_url, **kwargs)

    def slot_url(self) -> str:
        """The server that holds the app's keys: on a cluster, the node of the
        app's slot (same credentials and TLS settings, only the address changes)."""
        if not self.options.cluster:
            return self.options.client_url
        node = self.client.get_node_from_key(self.keys.wake)
        parts = urlsplit(self.options.client_url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@{node.host}:{node.port}" if userinfo else f"{node.host}:{node.port}"
        return urlunsplit((parts.scheme, netloc, "/0", parts.query, ""))

    def _make_listener_client(self) -> Any:
        # PUBLISH reaches every node of a cluster: subscribe on the slot's node.
        return aioredis.Redis.from_url(self.slot_url(), **self._client_kwargs())

    def make_direct(self, url: str) -> DirectConnections:
        pool = aioredis.ConnectionPool.from_url(
            url, connection_class=self._connection_class(), **self._client_kwargs()
        )
        # The same bound as redis-py's pool (the URL's max_connections, else its
        # default), which holds the other connections.
        return DirectConnections(pool.make_connection, pool.max_connections)

    def where(self) -> str:
        netloc = self.options.client_url.split("://", 1)[-1].rsplit("@", 1)[-1]
        return f"redis {netloc.split('?', 1)[0]} (prefix {self.options.prefix!r})"

    @contextlib.asynccontextmanager
    async def errors(self, what: str, blocking: float = 0.0) -> AsyncIterator[None]:
        """Redis and network errors as conveyor's typed errors; at most
        ``socket_timeout`` seconds (plus ``blocking``, a blocking command's own
        timeout), then :class:`BackendUnavailable`."""
        try:
            async with asyncio.timeout(self.options.socket_timeout + blocking):
                yield
        except _UNAVAILABLE as exc:
            await self._drop_idle_connections()
            detail = str(exc) or f"no answer within {self.options.socket_timeout:g}s"
            raise BackendUnavailable(f"redis: {what} failed: {detail}") from exc
        except ResponseError as exc:
            text = str(exc)
            if "LOADING" in text or "CLUSTERDOWN" in text or "TRYAGAIN" in text:
                raise BackendUnavailable(f"redis: {what} failed: {exc}") from exc
            raise BackendError(f"redis: {what} failed: {exc}") from exc
        except DataError as exc:  # a value redis cannot send: a caller's bug, not an outage
            raise BackendError(f"redis: {what} failed: {exc}") from exc
        except RedisError as exc:
            raise BackendUnavailable(f"redis: {what} failed: {exc}") from exc

    async def _drop_idle_connections(self) -> None:
        pool = getattr(self.client, "connection_pool", None)
        if pool is not None:
            with contextlib.suppress(Exception):
                await pool.disconnect(inuse_connections=False)
        if self.direct is not None:
            await self.direct.drop_idle()

    def ready(self) -> tuple[Any, ScriptRunner]:
        if self.client is None or self.runner is None:
            raise BackendUnavailable(f"{self.name}: the backend is not open")
        return self.client, self.runner

    async def run(self, name: str, keys: list[str], argv: list[Any]) -> Any:
        """One script call: ``scripts/<name>-N.lua`` on ``keys`` and ``argv``."""
        _, runner = self.ready()
        async with self.errors(name):
            return await runner.run(name, keys, argv)

    async def open(self) -> None:
        client = self._make_client()
        direct = None
        try:
            async with self.errors("open"):
                await client.ping()
                policy = await safety.read_maxmemory_policy(client)
                safety.check_maxmemory_policy(policy, self.options.maxmemory_check, self.where())
                if not self.options.cluster:
                    direct = self.make_direct(self.options.client_url)
                runner = ScriptRunner(direct or client, self.keys.base)
                await runner.load_all()
        except BaseException:
            with contextlib.suppress(Exception):
                await client.aclose()
            if direct is not None:
                await direct.close()
            raise
        self.client = client
        self.runner = runner
        self.direct = direct
        self.wake = WakeListener(self._make_listener_client, self.keys.wake)

    async def close(self) -> None:
        wake, self.wake = self.wake, None
        if wake is not None:
            await wake.close()
        client, self.client = self.client, None
        self.runner = None
        direct, self.direct = self.direct, None
        if direct is not None:
            await direct.close()
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()

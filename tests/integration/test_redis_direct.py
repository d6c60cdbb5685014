"""Connections of our own for scripts and the inbox pop (direct.py), on the real
server: error replies in a pipeline, connections the server closed, a call
cancelled midway, the connection limit, and closing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis_servers import delete_prefix

from conveyor.backends.base import NewJob
from conveyor.backends.redis import RedisBackend
from conveyor.backends.redis.connection import FastPackConnection
from conveyor.backends.redis.direct import DirectConnections
from conveyor.ids import new_id


class Counted:
    """A connection factory that counts what it made."""

    def __init__(self, url: str) -> None:
        self.pool = aioredis.ConnectionPool.from_url(url, connection_class=FastPackConnection)
        self.made = 0

    def __call__(self) -> FastPackConnection:
        self.made += 1
        return self.pool.make_connection()  # type: ignore[return-value]


@pytest.fixture
def factory(redis_url: str) -> Counted:
    return Counted(redis_url)


@pytest.fixture
async def direct(factory: Counted) -> AsyncIterator[DirectConnections]:
    connections = DirectConnections(factory, limit=100)
    yield connections
    await connections.close()


@pytest.fixture
def key() -> str:
    return f"direct-test:{uuid.uuid4().hex}"


def new_job() -> NewJob:
    return NewJob(id=new_id(), task="t", queue="default", payload=b"{}")


async def kill_client(redis_url: str, client_id: int) -> None:
    admin = aioredis.Redis.from_url(redis_url)
    try:
        await admin.execute_command("CLIENT", "KILL", "ID", client_id)
    finally:
        await admin.aclose()


async def test_an_error_reply_raises_after_every_reply_is_read(
    direct: DirectConnections, key: str
) -> None:
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await direct.pipeline([("SET", key, "v"), ("LPUSH", key, "x"), ("GET", key)])
    # The same connection again: no reply of the failed pipeline is left to read.
    assert await direct.execute("GET", key) == b"v"
    assert await direct.execute("DEL", key) == 1


async def test_a_connection_the_server_closed_is_replaced_once(
    direct: DirectConnections, factory: Counted, redis_url: str
) -> None:
    old_id = await direct.execute("CLIENT", "ID")
    await kill_client(redis_url, old_id)
    # The idle connection is dead: the call goes again on one new connection.
    assert await direct.execute("CLIENT", "ID") != old_id
    assert factory.made == 2


async def test_a_new_connection_that_fails_raises() -> None:
    dead = Counted("redis://127.0.0.1:1/0")  # nothing listens on port 1
    direct = DirectConnections(dead, limit=100)
    with pytest.raises(RedisConnectionError):
        await direct.execute("PING")
    assert dead.made == 1  # no second try when the first connection was new


async def test_a_call_cancelled_midway_closes_its_connection(
    direct: DirectConnections, key: str
) -> None:
    pop = asyncio.ensure_future(direct.execute("BLMPOP", 5, 1, key, "LEFT"))
    await asyncio.sleep(0.1)
    pop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pop
    await direct.execute("RPUSH", key, "item")
    # Had the cancelled pop's connection gone back, its late reply could be read
    # by this call, or its pop could take the item: neither happens.
    assert await direct.execute("LRANGE", key, 0, -1) == [b"item"]
    assert await direct.execute("DEL", key) == 1


async def test_close_ends_calls_in_flight_and_keeps_no_connection(
    direct: DirectConnections, key: str
) -> None:
    await asyncio.gather(direct.execute("PING"), direct.execute("PING"))
    assert len(direct._idle) == 2
    pop = asyncio.ensure_future(direct.execute("BLMPOP", 5, 1, key, "LEFT"))
    await asyncio.sleep(0.1)
    await direct.close()
    assert direct._idle == []
    with pytest.raises(RedisConnectionError):
        await asyncio.wait_for(pop, 2)  # not the pop's own 5 s: its connection closed
    assert await direct.execute("PING") == b"PONG"  # answers, on a connection it then closes
    assert direct._idle == []


async def test_calls_beyond_the_limit_wait_for_a_connection(factory: Counted) -> None:
    direct = DirectConnections(factory, limit=1)
    try:
        replies = await asyncio.gather(*(direct.execute("ECHO", str(i)) for i in range(5)))
        assert replies == [str(i).encode() for i in range(5)]
        assert factory.made == 1
    finally:
        await direct.close()


@pytest.mark.parametrize(("option", "limit"), [("&max_connections=1", 1), ("", 100)])
async def test_the_backend_bounds_them_like_redis_py(
    redis_url: str, option: str, limit: int
) -> None:
    prefix = f"t{uuid.uuid4().hex}"
    backend = RedisBackend(f"{redis_url}?prefix={prefix}{option}")
    await backend.open()
    try:
        batches = [[new_job()] for _ in range(5)]
        enqueued = await asyncio.gather(*(backend.enqueue_jobs(b) for b in batches))
        assert sorted(j[0].id for j in enqueued) == sorted(b[0].id for b in batches)
        direct = backend._conn.direct
        assert direct is not None
        assert len(direct._idle) == min(limit, 5)
    finally:
        await backend.close()
        await delete_prefix(redis_url, prefix)

"""Connections of our own for scripts and the inbox pop (direct.py), on the real
server: error replies in a pipeline, connections the server closed, a call
cancelled midway, and closing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError
from redis_servers import delete_prefix

from conveyor.backends.base import NewJob
from conveyor.backends.redis import RedisBackend
from conveyor.backends.redis.connection import FastPackConnection
from conveyor.backends.redis.direct import DirectConnections
from conveyor.ids import new_id


def new_job() -> NewJob:
    return NewJob(id=new_id(), task="t", queue="default", payload=b"{}")


@pytest.fixture
async def direct(redis_url: str) -> AsyncIterator[DirectConnections]:
    pool = aioredis.ConnectionPool.from_url(redis_url, connection_class=FastPackConnection)
    connections = DirectConnections(pool.make_connection)
    yield connections
    await connections.close()


@pytest.fixture
def key() -> str:
    return f"direct-test:{uuid.uuid4().hex}"


async def test_an_error_reply_raises_after_every_reply_is_read(
    direct: DirectConnections, key: str
) -> None:
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await direct.pipeline([("SET", key, "v"), ("LPUSH", key, "x"), ("GET", key)])
    # The same connection again: no reply of the failed pipeline is left to read.
    assert await direct.execute("GET", key) == b"v"
    assert await direct.execute("DEL", key) == 1


async def test_a_connection_the_server_closed_is_replaced_once(
    direct: DirectConnections, redis_url: str
) -> None:
    assert await direct.execute("PING") == b"PONG"
    ids = [await direct.execute("CLIENT", "ID")]
    admin = aioredis.Redis.from_url(redis_url)
    try:
        await admin.execute_command("CLIENT", "KILL", "ID", ids[0])
    finally:
        await admin.aclose()
    # The idle connection is dead: the call goes again on a new one and succeeds.
    new_id = await direct.execute("CLIENT", "ID")
    assert new_id != ids[0]


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


async def test_a_closed_instance_keeps_no_connection(direct: DirectConnections) -> None:
    await direct.execute("PING")
    await direct.close()
    assert await direct.execute("PING") == b"PONG"  # still answers, on a connection it then closes
    assert direct._idle == []


async def test_max_connections_bounds_them_and_calls_beyond_it_wait(redis_url: str) -> None:
    pool = aioredis.ConnectionPool.from_url(redis_url, connection_class=FastPackConnection)
    made: list[object] = []

    def make() -> FastPackConnection:
        made.append(connection := pool.make_connection())
        return connection  # type: ignore[return-value]

    direct = DirectConnections(make, limit=1)
    try:
        replies = await asyncio.gather(*(direct.execute("ECHO", str(i)) for i in range(5)))
        assert replies == [str(i).encode() for i in range(5)]
        assert len(made) == 1
    finally:
        await direct.close()


async def test_the_backend_takes_max_connections_from_its_url(redis_url: str) -> None:
    prefix = f"t{uuid.uuid4().hex}"
    backend = RedisBackend(f"{redis_url}?prefix={prefix}&max_connections=1")
    await backend.open()
    try:
        batches = [[new_job()] for _ in range(5)]
        enqueued = await asyncio.gather(*(backend.enqueue_jobs(b) for b in batches))
        assert sorted(j[0].id for j in enqueued) == sorted(b[0].id for b in batches)
        assert backend._direct is not None
        assert len(backend._direct._idle) == 1  # one connection served all five
    finally:
        await backend.close()
        await delete_prefix(redis_url, prefix)

"""A fresh key prefix per test on the shared Redis server, deleted after it:
the backend opened on it and a raw client to look at its keys."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis_servers import delete_prefix

from conveyor.backends.redis import RedisBackend


@pytest.fixture
async def url(redis_url: str) -> AsyncIterator[str]:
    """The shared server's URL with a fresh ``prefix``."""
    prefix = f"t{uuid.uuid4().hex}"
    yield f"{redis_url}?prefix={prefix}"
    await delete_prefix(redis_url, prefix)


@pytest.fixture
async def backend(url: str) -> AsyncIterator[RedisBackend]:
    opened = RedisBackend(url)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """A raw client of the shared server (keys are read through ``backend.keys``)."""
    opened = aioredis.Redis.from_url(redis_url)
    try:
        yield opened
    finally:
        await opened.aclose()

"""A PostgreSQL schema and a broker name prefix per test, both removed after it."""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aio_pika
import asyncpg
import pytest

from support.services import service_url


@dataclass
class Place:
    """Where one test's jobs live: its store URL and its dispatch URL."""

    postgres_url: str
    schema: str
    amqp_url: str
    prefix: str
    queues: set[str] = field(default_factory=set)
    #: Another store than the PostgreSQL schema (a SQLite file's URL).
    store_url: str | None = None

    @property
    def url(self) -> str:
        return self.store_url or f"{self.postgres_url}?schema={self.schema}"

    def dispatch(self, **options: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in {"prefix": self.prefix, **options}.items())
        return f"{self.amqp_url}?{query}"

    def broker_queue(self, queue: str) -> str:
        self.queues.add(queue)
        return f"{self.prefix}{queue}"

    async def message_count(self, queue: str) -> int:
        """Messages ready in the broker queue of ``queue`` (declared passively)."""
        connection = await aio_pika.connect(self.amqp_url)
        async with connection:
            channel = await connection.channel()
            declared = await channel.declare_queue(self.broker_queue(queue), passive=True)
            return declared.declaration_result.message_count or 0


@pytest.fixture(scope="session")
def amqp_url() -> str:
    return service_url("CONVEYOR_TEST_AMQP_URL", "RabbitMQ server")


async def _delete_broker_names(where: Place) -> None:
    connection = await aio_pika.connect(where.amqp_url)
    async with connection:
        channel = await connection.channel()
        for name in [*where.queues, "dead-letters"]:
            await channel.queue_delete(f"{where.prefix}{name}")
        await channel.exchange_delete(f"{where.prefix}dead-letter")


@pytest.fixture
async def sqlite_place(tmp_path: Path, amqp_url: str) -> AsyncIterator[Place]:
    """A SQLite file and a broker name prefix (RabbitMQ dispatch on one host)."""
    tag = uuid.uuid4().hex[:12]
    where = Place("", "", amqp_url, f"t{tag}.", store_url=f"sqlite:///{tmp_path / 'c.db'}")
    try:
        yield where
    finally:
        await _delete_broker_names(where)


@pytest.fixture
async def place(postgres_url: str, amqp_url: str) -> AsyncIterator[Place]:
    tag = uuid.uuid4().hex[:12]
    where = Place(postgres_url, f"t_{tag}", amqp_url, f"t{tag}.")
    try:
        yield where
    finally:
        await _delete_broker_names(where)
        conn = await asyncpg.connect(postgres_url)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{where.schema}" CASCADE')
        finally:
            await conn.close()


class Broker:
    """The test broker's node, driven through rabbitmqctl (CONVEYOR_TEST_RABBITMQCTL,
    a command line; scripts/services.sh sets it for a private node). Tests that
    use it stop the shared broker: they run serially and leave it started."""

    def __init__(self, command: str) -> None:
        self.command = shlex.split(command)

    async def ctl(self, *args: str, timeout: float = 60.0) -> None:
        process = await asyncio.create_subprocess_exec(
            *self.command,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await asyncio.wait_for(process.communicate(), timeout)
        assert process.returncode == 0, f"rabbitmqctl {' '.join(args)}: {output.decode()}"

    async def stop(self) -> None:
        await self.ctl("stop_app")

    async def start(self) -> None:
        await self.ctl("start_app")
        await self.ctl("await_startup")

    async def restart(self, down_for: float = 0.5) -> None:
        await self.stop()
        await asyncio.sleep(down_for)
        await self.start()

    async def close_all_connections(self) -> None:
        await self.ctl("close_all_connections", "conveyor test: connections closed")


def _rabbitmqctl() -> str:
    """Debian puts rabbitmqctl in /usr/sbin, which a minimal PATH leaves out."""
    return shutil.which("rabbitmqctl", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin") or (
        "rabbitmqctl"
    )


@pytest.fixture
async def broker(place: Place) -> AsyncIterator[Broker]:
    # After ``place``: torn down first, so the place's cleanup finds the broker up.
    node = Broker(os.environ.get("CONVEYOR_TEST_RABBITMQCTL", "").strip() or _rabbitmqctl())
    try:
        yield node
    finally:
        await node.start()  # up again for the next test, even after a failure

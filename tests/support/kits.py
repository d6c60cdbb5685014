"""One kit per backend of this package: how a test gets a fresh, real store.

Both the conformance suite and the in-process worker suite take their backends
from here, so a new backend plugs in at one place: subclass :class:`UrlKit` (a
:class:`conveyor.testing.conformance.BackendKit` reached by URL) and add it to
:data:`KITS`.

Select backends with ``CONVEYOR_TEST_BACKENDS`` (comma list; default: the four
stores, :data:`DEFAULT_BACKENDS`; ``postgres+rabbitmq`` is PostgreSQL with
RabbitMQ dispatch running beside it, see ``support/dispatched.py``). A kit
that needs a server (PostgreSQL, Redis) reads its URL from the environment
``scripts/test.sh`` exports; without it the test is skipped on a developer's
machine and fails under CI (see ``support/services.py``).
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from conveyor.backends.base import Backend
from conveyor.backends.registry import backend_from_url
from conveyor.testing.conformance.kit import BackendKit
from support.services import service_url

#: Not JSON: what a corrupt row's payload column holds.
CORRUPT = b"{this is not json"


class UrlKit(BackendKit):
    """A kit for a backend of this package, reached by URL: also how the worker
    suite builds apps (``Conveyor(kit.shared_url())``)."""

    def url(self) -> str:
        """A URL for a fresh, empty store for this test."""
        raise NotImplementedError

    def shared_url(self) -> str:
        """A URL that any number of backend instances (apps) open onto one store."""
        raise NotImplementedError

    def backend(self) -> Backend:
        return backend_from_url(self.url())

    def shared_backend(self) -> Backend:
        return backend_from_url(self.shared_url())

    def app_settings(self) -> dict[str, Any]:
        """Settings an app on this kit's store needs besides its URL."""
        return {}

    def attach(self, app: Any) -> None:
        """Called with each app built on this kit's store (the worker suite's)."""


class MemoryKit(UrlKit):
    name = "memory"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.store_name = f"tests-{uuid.uuid4().hex}"

    def url(self) -> str:
        return "memory://"

    def shared_url(self) -> str:
        return f"memory://{self.store_name}"

    async def corrupt_payload(self, backend: Backend, job_id: str) -> None:
        # The memory store is plain Python objects: poke the row directly.
        row = backend._store.jobs[job_id]  # type: ignore[attr-defined]
        row.payload = CORRUPT

    async def cleanup(self) -> None:
        from conveyor.backends.memory import drop_memory_store

        drop_memory_store(self.store_name)


class SQLiteKit(UrlKit):
    name = "sqlite"

    @property
    def path(self) -> Path:
        return self.tmp_path / "conveyor.db"

    def url(self) -> str:
        return f"sqlite:///{self.path}"

    def shared_url(self) -> str:
        return self.url()

    async def corrupt_payload(self, backend: Backend, job_id: str) -> None:
        with sqlite3.connect(self.path) as db:
            cursor = db.execute("UPDATE jobs SET payload = ? WHERE id = ?", (CORRUPT, job_id))
            assert cursor.rowcount == 1, f"no row for job {job_id} in {self.path}"


class RedisKit(UrlKit):
    """Each test on its own key prefix of the shared server; its keys are
    deleted afterwards (SCAN on the prefix, never FLUSHDB)."""

    name = "redis"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.server = service_url("CONVEYOR_TEST_REDIS_URL", "Redis server")
        self.prefix = f"t{uuid.uuid4().hex}"

    def url(self) -> str:
        sep = "&" if "?" in self.server else "?"
        return f"{self.server}{sep}prefix={self.prefix}"

    def shared_url(self) -> str:
        return self.url()

    def _client(self) -> Any:
        import redis.asyncio as aioredis

        return aioredis.Redis.from_url(self.server)

    async def corrupt_payload(self, backend: Backend, job_id: str) -> None:
        from conveyor.backends.redis.keys import Keys

        client = self._client()
        try:
            keys = Keys.for_prefix(self.prefix)
            key = keys.payload(job_id)
            assert await client.exists(key) == 1, f"no payload for job {job_id} at {key}"
            await client.set(key, CORRUPT)
        finally:
            await client.aclose()

    async def cleanup(self) -> None:
        from conveyor.backends.redis.keys import Keys

        client = self._client()
        try:
            doomed = [key async for key in client.scan_iter(Keys.for_prefix(self.prefix).pattern())]
            for start in range(0, len(doomed), 500):
                await client.delete(*doomed[start : start + 500])
        finally:
            await client.aclose()


class PostgresKit(UrlKit):
    """Each test in its own schema of the shared server, dropped (CASCADE) afterwards."""

    name = "postgres"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.server = service_url("CONVEYOR_TEST_POSTGRES_URL", "PostgreSQL server")
        self.schema = f"t_{uuid.uuid4().hex}"

    def url(self) -> str:
        sep = "&" if "?" in self.server else "?"
        return f"{self.server}{sep}schema={self.schema}"

    def shared_url(self) -> str:
        return self.url()

    async def corrupt_payload(self, backend: Backend, job_id: str) -> None:
        import asyncpg

        conn = await asyncpg.connect(self.server)
        try:
            status = await conn.execute(
                f'UPDATE "{self.schema}".jobs SET payload = $1 WHERE id = $2', CORRUPT, job_id
            )
        finally:
            await conn.close()
        assert status == "UPDATE 1", f"no row for job {job_id} in schema {self.schema}"

    async def cleanup(self) -> None:
        import asyncpg

        conn = await asyncpg.connect(self.server)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        finally:
            await conn.close()


class PostgresRabbitKit(PostgresKit):
    """PostgreSQL with RabbitMQ dispatch running beside it (support/dispatched.py):
    each test in its own schema and broker name prefix, both removed afterwards."""

    name = "postgres+rabbitmq"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        from support.dispatched import broker_prefix

        self.amqp = service_url("CONVEYOR_TEST_AMQP_URL", "RabbitMQ server")
        self.prefix = broker_prefix()
        self.opened: list[Backend] = []
        self.worker_queues: set[str] = set()

    def dispatch_url(self) -> str:
        sep = "&" if "?" in self.amqp else "?"
        return f"{self.amqp}{sep}prefix={self.prefix}"

    def backend(self) -> Backend:
        from support.dispatched import DispatchedPostgres

        backend = DispatchedPostgres(self.url(), self.dispatch_url())
        self.opened.append(backend)
        return backend

    def shared_backend(self) -> Backend:
        return self.backend()

    def app_settings(self) -> dict[str, Any]:
        return {"dispatch": self.dispatch_url()}

    def attach(self, app: Any) -> None:
        # A worker's own queue is made on the broker when it starts; the store
        # forgets the worker when it stops, so it is noted here for cleanup.
        def started(event: str, worker_id: str, **_: Any) -> None:
            self.worker_queues.add(f"worker.{worker_id}")

        app.on("worker_started", started)

    async def cleanup(self) -> None:
        from support.dispatched import DispatchedPostgres, delete_broker_names

        queues = {"default", *self.worker_queues}
        for backend in self.opened:
            if isinstance(backend, DispatchedPostgres):
                queues |= backend.broker_queues
        queues |= await self._stored_queue_names()
        try:
            await delete_broker_names(self.amqp, self.prefix, sorted(queues))
        finally:
            await super().cleanup()

    async def _stored_queue_names(self) -> set[str]:
        """Queues and worker queues the store knows of (an app's workers)."""
        import asyncpg

        conn = await asyncpg.connect(self.server)
        try:
            exists = await conn.fetchval("SELECT to_regclass($1)", f'"{self.schema}".jobs')
            if exists is None:
                return set()
            rows = await conn.fetch(f'SELECT DISTINCT queue FROM "{self.schema}".jobs')
            workers = await conn.fetch(f'SELECT id FROM "{self.schema}".workers')
        finally:
            await conn.close()
        return {r[0] for r in rows} | {f"worker.{r[0]}" for r in workers}


class SQLiteRabbitKit(SQLiteKit):
    """SQLite with RabbitMQ dispatch running beside it (support/dispatched.py):
    each test in its own file and broker name prefix."""

    name = "sqlite+rabbitmq"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        from support.dispatched import broker_prefix

        self.amqp = service_url("CONVEYOR_TEST_AMQP_URL", "RabbitMQ server")
        self.prefix = broker_prefix()
        self.opened: list[Backend] = []
        self.worker_queues: set[str] = set()

    def dispatch_url(self) -> str:
        sep = "&" if "?" in self.amqp else "?"
        return f"{self.amqp}{sep}prefix={self.prefix}"

    def backend(self) -> Backend:
        from support.dispatched import DispatchedSQLite

        backend = DispatchedSQLite(self.url(), self.dispatch_url())
        self.opened.append(backend)
        return backend

    def shared_backend(self) -> Backend:
        return self.backend()

    def app_settings(self) -> dict[str, Any]:
        return {"dispatch": self.dispatch_url()}

    def attach(self, app: Any) -> None:
        def started(event: str, worker_id: str, **_: Any) -> None:
            self.worker_queues.add(f"worker.{worker_id}")

        app.on("worker_started", started)

    async def cleanup(self) -> None:
        from support.dispatched import Dispatched, delete_broker_names

        queues = {"default", *self.worker_queues}
        for backend in self.opened:
            if isinstance(backend, Dispatched):
                queues |= backend.broker_queues
        if self.path.exists():
            with sqlite3.connect(self.path) as db:
                queues |= {r[0] for r in db.execute("SELECT DISTINCT queue FROM jobs")}
                queues |= {f"worker.{r[0]}" for r in db.execute("SELECT id FROM workers")}
        await delete_broker_names(self.amqp, self.prefix, sorted(queues))
        await super().cleanup()


KITS: dict[str, type[UrlKit]] = {
    kit.name: kit
    for kit in (MemoryKit, SQLiteKit, RedisKit, PostgresKit, PostgresRabbitKit, SQLiteRabbitKit)
}
#: The four stores; ``postgres+rabbitmq`` is chosen by name (the shared suites'
#: own modules run it: tests/conformance/test_conformance_dispatch.py).
DEFAULT_BACKENDS = ("memory", "sqlite", "redis", "postgres")


def selected_backends() -> list[str]:
    """Names from ``CONVEYOR_TEST_BACKENDS``, or the four stores."""
    raw = os.environ.get("CONVEYOR_TEST_BACKENDS", ",".join(DEFAULT_BACKENDS))
    names = [name.strip() for name in raw.split(",") if name.strip()]
    unknown = [name for name in names if name not in KITS]
    if unknown or not names:
        raise pytest.UsageError(
            f"CONVEYOR_TEST_BACKENDS={raw!r}: unknown backend(s) {unknown}; known: {sorted(KITS)}"
        )
    return names


def backend_params(exclude: tuple[str, ...] = ()) -> list[object]:
    """One ``pytest.param`` per selected backend but ``exclude`` (never skipped)."""
    return [pytest.param(name, id=name) for name in selected_backends() if name not in exclude]

"""Transactional enqueue: jobs inserted inside the caller's own transaction on
their own asyncpg or psycopg connection commit and roll back with it, and no
worker sees them before the commit."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import psycopg
import pytest

from conveyor import Conveyor
from conveyor.errors import ConfigurationError, QueueFull
from conveyor.job import JobState


@pytest.fixture
async def pg_app(postgres_url: str) -> AsyncIterator[Conveyor]:
    schema = f"t_{uuid.uuid4().hex}"
    app = Conveyor(f"{postgres_url}?schema={schema}")
    await app.connect()
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute(f'CREATE TABLE "{schema}".orders (id text PRIMARY KEY)')
        yield app
    finally:
        await app.close()
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


def _schema(app: Conveyor) -> str:
    return str(app.backend.options.schema)  # type: ignore[attr-defined]


async def _visible(app: Conveyor, job_id: str) -> bool:
    return await app.backend.get_job(job_id) is not None


async def _claimable(app: Conveyor) -> int:
    from conveyor.backends.base import ClaimRequest

    result = await app.backend.claim_jobs(ClaimRequest("w", ["default"], 10, 30.0))
    return len(result.jobs)


async def test_asyncpg_commit_and_rollback(pg_app: Conveyor, postgres_url: str) -> None:
    orders = f'"{_schema(pg_app)}".orders'
    conn = await asyncpg.connect(postgres_url)
    try:
        async with conn.transaction():
            await conn.execute(f"INSERT INTO {orders} VALUES ('o1')")
            job = await pg_app.enqueue("ship", {"order": "o1"}, connection=conn)
            assert job.state is JobState.WAITING
            # Not visible outside the transaction, so no worker can take it yet.
            assert not await _visible(pg_app, job.id)
            assert await _claimable(pg_app) == 0
        assert await _visible(pg_app, job.id)

        tr = conn.transaction()
        await tr.start()
        await conn.execute(f"INSERT INTO {orders} VALUES ('o2')")
        many = await pg_app.enqueue_many(
            [("ship", {"order": "o2"}), ("ship", {"order": "o3"})], connection=conn
        )
        await tr.rollback()
        assert [await _visible(pg_app, j.id) for j in many] == [False, False]
        assert await conn.fetchval(f"SELECT count(*) FROM {orders}") == 1
        assert await _claimable(pg_app) == 1  # only the committed job
    finally:
        await conn.close()


async def test_psycopg_commit_and_rollback(pg_app: Conveyor, postgres_url: str) -> None:
    orders = f'"{_schema(pg_app)}".orders'
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        async with conn.transaction():
            await conn.execute(f"INSERT INTO {orders} VALUES ('p1')")
            (job,) = await pg_app.enqueue_many(
                [("ship", {"order": "p1"}, {"priority": 3, "metadata": {"k": 1}})],
                connection=conn,
            )
            assert not await _visible(pg_app, job.id)
        stored = await pg_app.backend.get_job(job.id)
        assert stored is not None
        assert stored.priority == 3
        assert stored.metadata == {"k": 1}
        assert stored.payload == {"order": "p1"}

        await conn.execute(f"INSERT INTO {orders} VALUES ('p2')")  # opens a transaction
        lost = await pg_app.enqueue("ship", {"order": "p2"}, connection=conn)
        await conn.rollback()
        assert not await _visible(pg_app, lost.id)
        cur = await conn.execute(f"SELECT count(*) FROM {orders}")
        assert (await cur.fetchone()) == (1,)


async def test_a_rate_limit_key_inside_a_transaction(pg_app: Conveyor, postgres_url: str) -> None:
    """Both drivers store the key with the job (enqueue_rate_keyed), in the caller's
    transaction."""
    conn = await asyncpg.connect(postgres_url)
    try:
        async with conn.transaction():
            first = await pg_app.enqueue("ship", rate_limit_key="api-1", connection=conn)
    finally:
        await conn.close()
    async with (
        await psycopg.AsyncConnection.connect(postgres_url) as pconn,
        pconn.transaction(),
    ):
        second = await pg_app.enqueue("ship", rate_limit_key="api-2", connection=pconn)
    for job, key in ((first, "api-1"), (second, "api-2")):
        stored = await pg_app.backend.get_job(job.id)
        assert stored is not None
        assert stored.rate_limit_key == key


async def test_a_waiting_worker_wakes_at_commit(pg_app: Conveyor, postgres_url: str) -> None:
    backend = pg_app.backend
    conn = await asyncpg.connect(postgres_url)
    try:
        await backend.wait_for_work(["default"], 0)  # start listening
        tr = conn.transaction()
        await tr.start()
        await pg_app.enqueue("ship", {}, connection=conn)
        started = asyncio.get_running_loop().time()
        waiter = asyncio.create_task(backend.wait_for_work(["default"], 5))
        await asyncio.sleep(0.3)
        assert not waiter.done()  # nothing committed: no notification yet
        await tr.commit()
        await asyncio.wait_for(waiter, 5)
        assert asyncio.get_running_loop().time() - started < 2.0
    finally:
        await conn.close()


async def test_idempotency_key_inside_a_transaction(pg_app: Conveyor, postgres_url: str) -> None:
    conn = await asyncpg.connect(postgres_url)
    try:
        async with conn.transaction():
            first = await pg_app.enqueue("ship", {}, idempotency_key="k1", connection=conn)
            again = await pg_app.enqueue("ship", {}, idempotency_key="k1", connection=conn)
        assert again.duplicate
        assert again.id == first.id
        outside = await pg_app.enqueue("ship", {}, idempotency_key="k1")
        assert outside.duplicate
        assert outside.id == first.id
    finally:
        await conn.close()


async def test_a_full_queue_is_a_typed_error_and_stores_nothing(
    postgres_url: str,
) -> None:
    schema = f"t_{uuid.uuid4().hex}"
    app = Conveyor(f"{postgres_url}?schema={schema}")
    app.queue("small", max_size=1)
    await app.connect()
    try:
        async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
            with pytest.raises(QueueFull):
                async with conn.transaction():
                    await app.enqueue_many(
                        [("t", {}, {"queue": "small"}), ("t", {}, {"queue": "small"})],
                        connection=conn,
                    )
        assert await app.backend.count_jobs(_all()) == 0
    finally:
        await app.close()
        drop = await asyncpg.connect(postgres_url)
        await drop.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await drop.close()


def _all() -> Any:
    from conveyor.backends.base import JobFilter

    return JobFilter()


async def test_other_backends_refuse_a_connection(tmp_path: Any) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        with pytest.raises(ConfigurationError, match="PostgreSQL"):
            await app.enqueue("t", {}, connection=object())
        assert await app.backend.count_jobs(_all()) == 0
    finally:
        await app.close()


async def test_an_unknown_connection_type_is_a_typed_error(pg_app: Conveyor) -> None:
    with pytest.raises(ConfigurationError, match="asyncpg connection or a psycopg"):
        await pg_app.enqueue("t", {}, connection=object())

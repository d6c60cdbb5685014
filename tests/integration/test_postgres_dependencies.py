"""PostgreSQL-specific behaviour of dependencies between jobs, beyond the
conformance suite: completions on separate backends (connections) release a
join once, a dependent enqueued while its dependency completes is never left
blocked, plain jobs leave no dependency bookkeeping, the psycopg path refuses
an unknown dependency, and a schema at version 2 with jobs upgrades."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import psycopg
import pytest

from conveyor.backends.base import ClaimRequest, NewJob, Outcome, Settlement
from conveyor.backends.postgres import PostgresBackend
from conveyor.backends.postgres.migrate import LATEST, load_migrations, migrate
from conveyor.backends.postgres.queries import substitute
from conveyor.errors import InvalidWorkflow
from conveyor.ids import new_id
from conveyor.job import Job, JobState


@pytest.fixture
def schema() -> str:
    return f"t_{uuid.uuid4().hex}"


@pytest.fixture
async def conn(postgres_url: str, schema: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(postgres_url)
    try:
        yield connection
    finally:
        await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await connection.close()


@pytest.fixture
async def backends(
    postgres_url: str, schema: str, conn: asyncpg.Connection
) -> AsyncIterator[list[PostgresBackend]]:
    """Two backends (two pools) on one schema, like two machines."""
    opened = [PostgresBackend(f"{postgres_url}?schema={schema}") for _ in range(2)]
    for backend in opened:
        await backend.open()
    try:
        yield opened
    finally:
        for backend in opened:
            await backend.close()


def _job(**options: object) -> NewJob:
    return NewJob(id=new_id(), task="t", queue="q", payload=b"{}", **options)  # type: ignore[arg-type]


async def _claim(backend: PostgresBackend, limit: int = 100) -> list[Job]:
    request = ClaimRequest(queues=["q"], limit=limit, lease=30, worker_id=new_id())
    return (await backend.claim_jobs(request)).jobs


def _done(job: Job) -> Settlement:
    assert job.lease_token is not None
    return Settlement(job.id, job.lease_token, Outcome.COMPLETE, task=job.task)


async def _state(backend: PostgresBackend, job_id: str) -> JobState:
    (job,) = await backend.get_jobs([job_id])
    return job.state


async def _edges(conn: asyncpg.Connection, schema: str) -> int:
    return int(await conn.fetchval(f'SELECT count(*) FROM "{schema}".job_dependencies'))


async def test_completions_on_two_backends_release_each_join_once(
    backends: list[PostgresBackend], conn: asyncpg.Connection, schema: str
) -> None:
    first, second = backends
    for _ in range(5):
        parents = [_job() for _ in range(12)]
        join = _job(depends_on=[p.id for p in parents])
        await first.enqueue_jobs([*parents, join])
        claimed = await _claim(first)
        assert len(claimed) == 12
        # One settlement per call, alternating backends: 12 transactions at once.
        await asyncio.gather(
            *(
                (first if i % 2 else second).settle_jobs([_done(job)])
                for i, job in enumerate(claimed)
            )
        )
        assert await _state(first, join.id) is JobState.WAITING
        released = await _claim(second)
        assert [job.id for job in released] == [join.id]
        await second.settle_jobs([_done(released[0])])
    assert await _edges(conn, schema) == 0  # every edge resolved and gone


async def test_a_dependent_enqueued_while_its_dependency_completes_is_not_left_blocked(
    backends: list[PostgresBackend], conn: asyncpg.Connection, schema: str
) -> None:
    first, second = backends
    for _ in range(20):
        parent = _job()
        await first.enqueue_jobs([parent])
        (running,) = await _claim(first, limit=1)
        child = _job(depends_on=[parent.id])
        await asyncio.gather(first.settle_jobs([_done(running)]), second.enqueue_jobs([child]))
        assert await _state(first, child.id) is JobState.WAITING
        (released,) = await _claim(second, limit=1)
        assert released.id == child.id
        await second.settle_jobs([_done(released)])
    assert await _edges(conn, schema) == 0


async def test_plain_jobs_leave_no_dependency_bookkeeping(
    backends: list[PostgresBackend], conn: asyncpg.Connection, schema: str
) -> None:
    backend = backends[0]
    await backend.enqueue_jobs([_job() for _ in range(5)])
    await backend.settle_jobs([_done(job) for job in await _claim(backend)])
    flagged = await conn.fetchval(f'SELECT count(*) FROM "{schema}".jobs WHERE has_dependents')
    assert flagged == 0
    assert await _edges(conn, schema) == 0
    # A dependency is flagged only while a blocked job waits on it.
    parent = _job()
    child = _job(depends_on=[parent.id], workflow_id="wf")
    stored = await backend.enqueue_jobs([parent, child])
    assert [j.state for j in stored] == [JobState.WAITING, JobState.BLOCKED]
    flagged_ids = await conn.fetch(f'SELECT id FROM "{schema}".jobs WHERE has_dependents')
    assert [r[0] for r in flagged_ids] == [parent.id]
    assert await _edges(conn, schema) == 1


async def test_psycopg_enqueue_refuses_an_unknown_dependency(
    backends: list[PostgresBackend], postgres_url: str
) -> None:
    backend = backends[0]
    async with await psycopg.AsyncConnection.connect(postgres_url) as pconn:
        with pytest.raises(InvalidWorkflow, match="no-such-job"):
            async with pconn.transaction():
                await backend.enqueue_jobs_on(pconn, [_job(depends_on=["no-such-job"])])
        parent = _job()
        async with pconn.transaction():
            stored = await backend.enqueue_jobs_on(pconn, [parent, _job(depends_on=[parent.id])])
    assert [j.state for j in stored] == [JobState.WAITING, JobState.BLOCKED]
    assert (await backend.get_jobs([stored[1].id]))[0].depends_on == (parent.id,)


async def test_a_version_2_schema_with_jobs_upgrades(
    conn: asyncpg.Connection, schema: str, postgres_url: str
) -> None:
    channel = f"{schema}_work"
    await conn.execute(f'CREATE SCHEMA "{schema}"')
    await conn.execute(
        f'CREATE TABLE "{schema}".schema_migrations'
        " (version integer PRIMARY KEY, name text NOT NULL, applied_at float8 NOT NULL)"
    )
    for migration in load_migrations()[:2]:
        await conn.execute(substitute(migration.script, schema, channel))
        await conn.execute(
            f'INSERT INTO "{schema}".schema_migrations VALUES ($1, $2, 0)',
            migration.version,
            migration.name,
        )
    old_id = new_id()
    await conn.execute(
        f'INSERT INTO "{schema}".jobs (id, task, queue, state, run_at, created_at, payload)'
        " VALUES ($1, 't', 'q', 'waiting', 0, 0, '{}')",
        old_id,
    )
    report = await migrate(conn, schema, channel)
    assert report.before == 2
    assert report.after == LATEST
    backend = PostgresBackend(f"{postgres_url}?schema={schema}")
    await backend.open()
    try:
        (old,) = await backend.get_jobs([old_id])
        assert old.state is JobState.WAITING
        assert old.depends_on == ()
        (child,) = await backend.enqueue_jobs([_job(depends_on=[old_id])])
        assert child.state is JobState.BLOCKED
        (running,) = await _claim(backend, limit=1)
        assert running.id == old_id
        await backend.settle_jobs([_done(running)])
        assert await _state(backend, child.id) is JobState.WAITING
    finally:
        await backend.close()

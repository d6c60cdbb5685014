"""PostgreSQL schema: schema.sql (the snapshot) equals every migration applied,
compared through the catalog; migrating is automatic, idempotent and safe when
many processes open a fresh schema at once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from conveyor.backends.postgres import PostgresBackend
from conveyor.backends.postgres.decode import CONCURRENCY_KEY, RATE_LIMIT_KEY
from conveyor.backends.postgres.migrate import LATEST, current_version, load_schema, migrate
from conveyor.backends.postgres.queries import substitute
from conveyor.errors import BackendError, ConfigurationError


@pytest.fixture
async def conn(postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(postgres_url)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
def schemas() -> list[str]:
    return []


@pytest.fixture(autouse=True)
async def _drop(schemas: list[str], postgres_url: str) -> AsyncIterator[None]:
    yield
    connection = await asyncpg.connect(postgres_url)
    try:
        for name in schemas:
            await connection.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await connection.close()


def fresh(schemas: list[str]) -> str:
    name = f"t_{uuid.uuid4().hex}"
    schemas.append(name)
    return name


async def catalog(conn: asyncpg.Connection, schema: str) -> dict[str, Any]:
    """Everything about ``schema`` that the backend relies on, with the schema's
    own name replaced so two schemas compare equal."""

    def norm(value: Any) -> Any:
        return (
            value.replace(f'"{schema}"', "S").replace(schema, "S")
            if isinstance(value, str)
            else value
        )

    async def rows(sql: str) -> list[tuple[Any, ...]]:
        return sorted(tuple(norm(v) for v in r) for r in await conn.fetch(sql, schema))

    return {
        "columns": await rows(
            "SELECT table_name, column_name, ordinal_position, data_type, is_nullable,"
            " column_default, collation_name FROM information_schema.columns"
            " WHERE table_schema = $1 AND table_name <> 'schema_migrations'"
        ),
        "indexes": await rows(
            "SELECT tablename, indexname, indexdef FROM pg_indexes"
            " WHERE schemaname = $1 AND tablename <> 'schema_migrations'"
        ),
        "constraints": await rows(
            "SELECT c.relname, k.conname, k.contype::text, pg_get_constraintdef(k.oid)"
            " FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = $1 AND c.relname <> 'schema_migrations'"
        ),
        "tables": await rows(
            "SELECT c.relname, c.relkind::text, coalesce(array_to_string(c.reloptions, ','), '')"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = $1 AND c.relname NOT LIKE 'schema_migrations%'"
        ),
        "functions": await rows(
            "SELECT p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),"
            " p.prosrc, coalesce(array_to_string(p.proconfig, ','), '')"
            " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = $1"
        ),
    }


async def test_schema_sql_equals_all_migrations(
    conn: asyncpg.Connection, schemas: list[str]
) -> None:
    migrated = fresh(schemas)
    report = await migrate(conn, migrated, f"{migrated}_work")
    assert report.before == 0
    assert report.after == LATEST
    assert len(report.applied) == LATEST

    snapshot = fresh(schemas)
    await conn.execute(f'CREATE SCHEMA "{snapshot}"')
    await conn.execute(substitute(load_schema(), snapshot, f"{snapshot}_work"))
    a = await catalog(conn, migrated)
    b = await catalog(conn, snapshot)
    for part in a:
        assert a[part], f"no {part} found: the catalog query is wrong"
        assert a[part] == b[part], f"schema.sql and the migrations differ in {part}"


async def test_the_decoder_finds_the_late_columns_where_the_table_has_them(
    conn: asyncpg.Connection, schemas: list[str]
) -> None:
    """``j.*`` rows are decoded by position: the columns migrations appended must
    sit where decode.py reads them."""
    name = fresh(schemas)
    await migrate(conn, name, f"{name}_work")
    columns = [
        row[0]
        for row in await conn.fetch(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = $1 AND table_name = 'jobs' ORDER BY ordinal_position",
            name,
        )
    ]
    assert columns.index("concurrency_key") == CONCURRENCY_KEY
    assert columns.index("rate_limit_key") == RATE_LIMIT_KEY


async def test_migrating_again_does_nothing(conn: asyncpg.Connection, schemas: list[str]) -> None:
    name = fresh(schemas)
    await migrate(conn, name, f"{name}_work")
    again = await migrate(conn, name, f"{name}_work")
    assert again.applied == []
    assert again.before == again.after == LATEST
    assert await current_version(conn, name) == LATEST


async def test_many_processes_opening_a_fresh_schema_at_once(
    postgres_url: str, schemas: list[str], conn: asyncpg.Connection
) -> None:
    name = fresh(schemas)
    backends = [PostgresBackend(f"{postgres_url}?schema={name}") for _ in range(6)]
    try:
        await asyncio.gather(*(b.open() for b in backends))
        applied = [b.migration.applied for b in backends if b.migration is not None]
        assert sum(len(a) for a in applied) == LATEST  # exactly one opener migrated
        versions = await conn.fetch(f'SELECT version FROM "{name}".schema_migrations')
        assert [r[0] for r in versions] == list(range(1, LATEST + 1))
    finally:
        await asyncio.gather(*(b.close() for b in backends))


async def test_a_newer_schema_is_refused(conn: asyncpg.Connection, schemas: list[str]) -> None:
    name = fresh(schemas)
    await migrate(conn, name, f"{name}_work")
    await conn.execute(
        f'INSERT INTO "{name}".schema_migrations VALUES ($1, $2, 0)', LATEST + 1, "9999_future.sql"
    )
    with pytest.raises(BackendError, match="newer than this conveyor"):
        await migrate(conn, name, f"{name}_work")


@pytest.mark.parametrize("bad", ["Upper", "1starts_with_digit", "semi;colon", 'quo"te', "x" * 59])
def test_invalid_schema_names_are_refused(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="schema"):
        PostgresBackend(f"postgresql://localhost/db?schema={bad}")


def test_unknown_numbers_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="pool_size"):
        PostgresBackend("postgresql://localhost/db?pool_size=zero")
    with pytest.raises(ConfigurationError, match="command_timeout"):
        PostgresBackend("postgresql://localhost/db?command_timeout=-1")


async def test_fair_flag_migration_marks_the_jobs_of_fair_queues(
    conn: asyncpg.Connection, schemas: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 9 flags the jobs stored under version 8 of queues already fair,
    so their waiting jobs stay in the fair index."""
    from conveyor.backends.postgres import migrate as migrate_module

    name = fresh(schemas)
    up_to_8 = [m for m in migrate_module.load_migrations() if m.version <= 8]
    monkeypatch.setattr(migrate_module, "load_migrations", lambda: up_to_8)
    assert (await migrate(conn, name, f"{name}_work")).after == 8
    monkeypatch.undo()
    await conn.execute(f"INSERT INTO \"{name}\".queues (name, fairness) VALUES ('fair', 'tenant')")
    await conn.executemany(
        f'INSERT INTO "{name}".jobs (id, task, queue, state, run_at, created_at, tenant, payload)'
        " VALUES ($1, 't', $2, $3, $4, 0, $5, '{}')",
        [
            ("a1", "fair", "waiting", 1.0, "a"),
            ("a2", "fair", "waiting", 2.0, "a"),
            ("b1", "fair", "delayed", 3.0, "b"),
            ("p1", "plain", "waiting", 1.0, "a"),
        ],
    )
    assert (await migrate(conn, name, f"{name}_work")).after == LATEST
    flags = dict(await conn.fetch(f'SELECT id, fair FROM "{name}".jobs'))
    assert flags == {"a1": True, "a2": True, "b1": True, "p1": False}
    definition = await conn.fetchval(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'jobs_fair'",
        name,
    )
    assert definition.endswith("WHERE ((state = 'waiting'::text) AND fair)")

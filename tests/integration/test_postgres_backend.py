"""PostgreSQL-specific behaviour beyond the conformance suite: URL options,
typed errors when the server cannot be reached, coalesced notifications, the
claim's plan, and ``conveyor migrate``."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from click.testing import CliRunner

from conveyor.backends.base import ClaimRequest, NewJob
from conveyor.backends.postgres import PostgresBackend
from conveyor.backends.postgres.migrate import LATEST
from conveyor.backends.postgres.queries import for_schema
from conveyor.backends.postgres.url import parse_url
from conveyor.cli.main import cli
from conveyor.errors import BackendUnavailable, ConfigurationError
from conveyor.ids import new_id


@pytest.fixture
def schema() -> str:
    return f"t_{uuid.uuid4().hex}"


@pytest.fixture
async def backend(postgres_url: str, schema: str) -> AsyncIterator[PostgresBackend]:
    opened = PostgresBackend(f"{postgres_url}?schema={schema}")
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()
        conn = await asyncpg.connect(postgres_url)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


def _job(queue: str = "default") -> NewJob:
    return NewJob(id=new_id(), task="t", queue=queue, payload=b"{}")


def test_url_options_are_parsed_and_the_rest_passed_on() -> None:
    options = parse_url(
        "postgres://u:p@h:6543/db?schema=jobs&pool_size=3&connect_timeout=250ms"
        "&command_timeout=2&sslmode=disable&application_name=shop"
    )
    assert options.schema == "jobs"
    assert options.pool_size == 3
    assert options.connect_timeout == 0.25
    assert options.command_timeout == 2.0
    assert options.channel == "jobs_work"
    assert options.dsn == ("postgresql://u:p@h:6543/db?sslmode=disable&application_name=shop")
    assert parse_url("postgresql://h/db").schema == "conveyor"
    with pytest.raises(ConfigurationError, match="connect_timeout"):
        parse_url("postgresql://h/db?connect_timeout=soon")


async def test_an_unreachable_server_is_a_typed_error_not_a_hang() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = PostgresBackend(f"postgresql://postgres@127.0.0.1:{port}/x?connect_timeout=1")
    started = time.monotonic()
    with pytest.raises(BackendUnavailable):
        await backend.open()
    assert time.monotonic() - started < 5
    await backend.close()


async def test_a_batch_is_one_notification_per_queue(
    backend: PostgresBackend, postgres_url: str
) -> None:
    received: list[str] = []
    listener = await asyncpg.connect(postgres_url)
    await listener.add_listener(
        backend.options.channel, lambda *args: received.append(str(args[3]))
    )
    try:
        await backend.enqueue_jobs(
            [_job("a") for _ in range(300)] + [_job("b") for _ in range(200)]
        )
        await backend.enqueue_jobs([_job("a")])
        await asyncio.sleep(0.3)
    finally:
        await listener.close()
    assert sorted(received) == ["a", "a", "b"]


async def test_a_waiting_worker_wakes_within_milliseconds(
    backend: PostgresBackend, postgres_url: str, schema: str
) -> None:
    producer = PostgresBackend(f"{postgres_url}?schema={schema}")
    await producer.open()
    try:
        await backend.wait_for_work(["default"], 0)  # listening from here on
        took: list[float] = []
        for _ in range(5):
            waiter = asyncio.create_task(backend.wait_for_work(["default"], 5))
            await asyncio.sleep(0.05)
            started = time.monotonic()
            await producer.enqueue_jobs([_job()])
            await asyncio.wait_for(waiter, 5)
            took.append(time.monotonic() - started)
            await backend.claim_jobs(ClaimRequest("w", ["default"], 10, 30.0))
        assert sorted(took)[2] < 0.25, took  # the median, generous for a busy machine
    finally:
        await producer.close()


async def test_the_claim_walks_the_claim_index(backend: PostgresBackend, postgres_url: str) -> None:
    """Even with a generic plan (what a long-lived connection ends up using)."""
    schema = backend.options.schema
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute(
            f'INSERT INTO "{schema}".jobs (id, task, queue, state, run_at, created_at, payload) '
            "SELECT lpad(to_hex(g), 26, '0'), 't', 'default', 'waiting', 1, 1, '\\x7b7d'::bytea "
            "FROM generate_series(1, 20000) AS g"
        )
        await conn.execute(f'ANALYZE "{schema}".jobs')
        await conn.execute("LOAD 'auto_explain'")
        await conn.execute("SET auto_explain.log_min_duration = 0")
        await conn.execute("SET auto_explain.log_nested_statements = on")
        await conn.execute("SET client_min_messages = log")
        await conn.execute("SET auto_explain.log_level = notice")
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        plans: list[str] = []
        conn.add_log_listener(lambda _conn, message: plans.append(str(message)))
        async with conn.transaction():
            rows = await conn.fetch(
                f"SELECT id FROM \"{schema}\".claim(ARRAY['default'], 50, 30, 'w', 't', "
                "NULL, NULL, NULL, NULL, NULL, true, NULL, NULL, NULL, NULL, NULL)"
            )
            assert len(rows) == 50
        await asyncio.sleep(0.1)
    finally:
        await conn.close()
    chosen = [p for p in plans if "LockRows" in p and "unnest" in p]
    assert chosen, plans
    assert all("jobs_claim" in p and "Seq Scan on jobs" not in p for p in chosen), chosen


async def test_workflow_reads_use_jobs_workflow_in_generic_plans(
    backend: PostgresBackend, postgres_url: str
) -> None:
    """get_workflow's list and the workflow events' count search jobs_workflow
    even in a generic plan; the generic list_jobs they replaced scans every job."""
    schema = backend.options.schema
    q = for_schema(schema, backend.options.channel)
    conn = await asyncpg.connect(postgres_url, statement_cache_size=0)
    try:
        await conn.execute(
            f'INSERT INTO "{schema}".jobs (id, task, queue, state, run_at, created_at, payload, '
            "workflow_id) SELECT lpad(to_hex(g), 26, '0'), 't', 'default', 'waiting', 1, 1, "
            "'\\x7b7d'::bytea, CASE WHEN g % 100 = 0 THEN 'wf' END "
            "FROM generate_series(1, 20000) AS g"
        )
        await conn.execute(f'ANALYZE "{schema}".jobs')
        await conn.execute("SET plan_cache_mode = force_generic_plan")

        async def plan(sql: str, args: str) -> str:
            await conn.execute("DEALLOCATE ALL")
            await conn.execute(f"PREPARE p AS {sql}")
            rows = await conn.fetch(f"EXPLAIN (COSTS OFF) EXECUTE p({args})")
            return "\n".join(row[0] for row in rows)

        nulls = "NULL, NULL, NULL, NULL, NULL, NULL, NULL"
        for sql, args in [
            (q.list_workflow_jobs, f"{nulls}, 'wf', 100, 0"),
            (q.count_workflow_jobs, f"ARRAY['waiting'], {nulls[6:]}, 'wf'"),
        ]:
            shown = await plan(sql, args)
            assert "jobs_workflow" in shown, shown
            assert "Seq Scan" not in shown, shown
        assert "Seq Scan on jobs" in await plan(q.list_jobs, f"{nulls}, 'wf', 100, 0")
    finally:
        await conn.close()


async def test_only_the_claim_commits_without_waiting_for_the_flush(
    backend: PostgresBackend, postgres_url: str
) -> None:
    """A lost claim only makes a job run again; a lost enqueue would lose it."""
    await backend.enqueue_jobs([_job()])
    conn = await asyncpg.connect(postgres_url)
    try:
        # The session's own setting, whatever the server's default (the test
        # script's private server runs with synchronous_commit off).
        await conn.execute("SET synchronous_commit = on")
        async with conn.transaction():
            rows = await conn.fetch(
                backend.q.claim,
                *(["default"], 10, 30.0, "w", "t", None, None, None, None, None, True, None, None),
                *(None, None, None),
            )
            assert len(rows) == 1
            assert await conn.fetchval("SHOW synchronous_commit") == "off"
        assert await conn.fetchval("SHOW synchronous_commit") == "on"  # this transaction only
    finally:
        await conn.close()
    for name in ("enqueue", "enqueue_plain", "settle", "renew"):
        assert "synchronous_commit" not in getattr(backend.q, name), name


def test_conveyor_migrate(postgres_url: str, schema: str) -> None:
    url = f"{postgres_url}?schema={schema}"
    runner = CliRunner()
    try:
        first = runner.invoke(cli, ["--url", url, "migrate"])
        assert first.exit_code == 0, first.output
        assert f"migrated from version 0 to {LATEST}" in first.output
        assert "0001_initial.sql" in first.output
        assert "0002_claim_generic_plan.sql" in first.output
        again = runner.invoke(cli, ["--url", url, "migrate", "--json"])
        assert again.exit_code == 0, again.output
        report = json.loads(again.output)
        assert report == {
            "backend": "postgresql",
            "schema": schema,
            "version_before": LATEST,
            "version": LATEST,
            "applied": [],
        }
    finally:

        async def drop() -> None:
            conn = await asyncpg.connect(postgres_url)
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            await conn.close()

        asyncio.run(drop())


def test_conveyor_migrate_on_sqlite_and_memory(tmp_path: object) -> None:
    runner = CliRunner()
    url = f"sqlite:///{tmp_path}/m.db"
    first = runner.invoke(cli, ["--url", url, "migrate", "--json"])
    assert first.exit_code == 0, first.output
    report = json.loads(first.output)
    assert report["version_before"] == 0
    assert report["applied"]
    assert report["version"] == len(report["applied"])
    again = runner.invoke(cli, ["--url", url, "migrate"])
    assert "up to date" in again.output
    memory = runner.invoke(cli, ["--url", "memory://", "migrate"])
    assert memory.exit_code == 0
    assert "nothing to migrate" in memory.output

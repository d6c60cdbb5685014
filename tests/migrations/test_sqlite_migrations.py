"""SQLite schema: all migrations applied == schema.sql, and opening is safe.

- a fresh database built from every migration has exactly the schema of
  ``schema.sql`` (normalized ``sqlite_master``), at the latest ``user_version``;
- opening a database again (same instance, new instance, already migrated) is
  a no-op that keeps the data;
- several processes opening one fresh file at the same moment all succeed,
  and the migrations ran once;
- a database made by a newer conveyor is refused, not damaged.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conveyor.backends.base import JobFilter, NewJob
from conveyor.backends.sqlite import SQLiteBackend
from conveyor.backends.sqlite.migrate import (
    LATEST,
    load_migrations,
    load_schema,
    migrate,
    split_statements,
)
from conveyor.errors import BackendError
from conveyor.ids import new_id

SchemaRow = tuple[str, str, str, str]


def _normalize(sql: str) -> str:
    without_comments = re.sub(r"--[^\n]*", "", sql)
    return " ".join(without_comments.split()).replace("( ", "(").replace(" )", ")")


def schema_of(path: Path) -> list[SchemaRow]:
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master "
            "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
        ).fetchall()
    return [(kind, name, table, _normalize(sql or "")) for kind, name, table, sql in rows]


def version_of(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("PRAGMA user_version").fetchone()[0])


def migrate_file(path: Path) -> int:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        before = migrate(db)
        db.execute("COMMIT")
        return before
    finally:
        db.close()


def test_migrations_are_numbered_from_one() -> None:
    migrations = load_migrations()
    assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))
    assert LATEST == len(migrations) >= 1


def test_all_migrations_equal_schema_snapshot(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated.db"
    assert migrate_file(migrated) == 0
    assert version_of(migrated) == LATEST

    snapshot = tmp_path / "snapshot.db"
    with sqlite3.connect(snapshot) as db:
        for statement in load_schema():
            db.execute(statement)

    assert schema_of(migrated) == schema_of(snapshot)
    assert {name for kind, name, _, _ in schema_of(migrated) if kind == "table"} >= {
        "jobs",
        "idempotency_keys",
        "queues",
        "circuits",
        "rate_starts",
        "workers",
    }


def test_migrating_again_is_a_no_op(tmp_path: Path) -> None:
    path = tmp_path / "again.db"
    migrate_file(path)
    schema = schema_of(path)
    assert migrate_file(path) == LATEST
    assert schema_of(path) == schema
    assert version_of(path) == LATEST


def test_each_migration_sets_its_version(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "steps.db", isolation_level=None)
    try:
        for migration in load_migrations():
            db.execute("BEGIN IMMEDIATE")
            for statement in migration.statements:
                db.execute(statement)
            db.execute("COMMIT")
            assert db.execute("PRAGMA user_version").fetchone()[0] == migration.version
    finally:
        db.close()


def test_split_statements_keeps_semicolons_inside_strings() -> None:
    script = "-- a comment; with a semicolon\nCREATE TABLE t (x TEXT DEFAULT ';');\nSELECT 1;\n"
    assert split_statements(script) == [
        "-- a comment; with a semicolon\nCREATE TABLE t (x TEXT DEFAULT ';');",
        "SELECT 1;",
    ]


async def test_open_twice_keeps_data(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/nested/dir/twice.db"  # parent folders are created
    first = SQLiteBackend(url)
    await first.open()
    await first.open()  # idempotent on one instance
    (job,) = await first.enqueue_jobs([NewJob(id=new_id(), task="t", queue="q", payload=b"{}")])
    await first.close()
    await first.close()

    second = SQLiteBackend(url)
    await second.open()
    try:
        assert [j.id for j in await second.list_jobs(JobFilter())] == [job.id]
    finally:
        await second.close()
    assert version_of(tmp_path / "nested" / "dir" / "twice.db") == LATEST

    await first.open()  # an instance can be opened again after close
    try:
        assert await first.count_jobs(JobFilter()) == 1
    finally:
        await first.close()


_OPENER = textwrap.dedent(
    """
    import asyncio, sys, time
    from conveyor.backends.base import NewJob
    from conveyor.backends.sqlite import SQLiteBackend
    from conveyor.ids import new_id

    url, start = sys.argv[1], float(sys.argv[2])

    async def main() -> None:
        while time.time() < start:  # line the processes up on one instant
            await asyncio.sleep(0.001)
        backend = SQLiteBackend(url)
        await backend.open()
        await backend.enqueue_jobs([NewJob(id=new_id(), task="t", queue="q", payload=b"{}")])
        await backend.close()

    asyncio.run(main())
    print("ok")
    """
)


@pytest.mark.parametrize("processes", [4])
def test_processes_opening_a_fresh_file_at_once(tmp_path: Path, processes: int) -> None:
    path = tmp_path / "race.db"
    start = time.time() + 1.5  # after every interpreter has started
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER, f"sqlite:///{path}", str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    outputs = [child.communicate(timeout=60) for child in children]
    for child, (out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
        assert out.strip() == "ok"

    assert version_of(path) == LATEST
    reference = tmp_path / "reference.db"
    migrate_file(reference)
    assert schema_of(path) == schema_of(reference)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM jobs").fetchone()[0] == processes


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    migrate_file(path)
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {LATEST + 1}")
    backend = SQLiteBackend(f"sqlite:///{path}")
    with pytest.raises(BackendError, match="newer"):
        await backend.open()
    await backend.close()
    assert version_of(path) == LATEST + 1


async def test_fair_flag_migration_marks_the_jobs_of_fair_queues(tmp_path: Path) -> None:
    """0010 flags the jobs stored under 0009 of queues already fair, so their
    waiting jobs stay in the fair index and keep their tenants' turns."""
    path = tmp_path / "upgrade.db"
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        for migration in load_migrations():
            if migration.version < 10:
                for statement in migration.statements:
                    db.execute(statement)
        db.execute("INSERT INTO queues (name, fairness) VALUES ('fair', 'tenant')")
        insert = (
            "INSERT INTO jobs (id, task, queue, state, priority, max_attempts, run_at,"
            " created_at, tenant, payload) VALUES (?, 't', ?, ?, 0, 3, ?, 0, ?, x'7b7d')"
        )
        rows = [
            ("a1", "fair", "waiting", 1.0, "a"),
            ("a2", "fair", "waiting", 2.0, "a"),
            ("b1", "fair", "delayed", 3.0, "b"),
            ("p1", "plain", "waiting", 1.0, "a"),
        ]
        db.executemany(insert, rows)
        db.execute("COMMIT")
    finally:
        db.close()
    assert migrate_file(path) == 9
    assert version_of(path) == LATEST
    with sqlite3.connect(path) as done:
        flags = dict(done.execute("SELECT id, fair FROM jobs").fetchall())
        fair_index = done.execute(
            "SELECT id FROM jobs INDEXED BY jobs_fair"
            " WHERE state = 'waiting' AND fair = 1 AND queue = 'fair' ORDER BY id"
        ).fetchall()
    assert flags == {"a1": 1, "a2": 1, "b1": 1, "p1": None}
    assert fair_index == [("a1",), ("a2",)]

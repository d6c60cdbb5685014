"""SQLite-only sides of dependencies between jobs that the conformance suite
cannot see: plain jobs run none of the dependency statements, the
``job_dependencies`` rows go once resolved, a batch of completions that holds
a waited-for job falls back to the exact path, and a database of schema 3
upgrades with its jobs readable."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from conveyor.backends.base import ClaimRequest, NewJob, Outcome, Settlement
from conveyor.backends.sqlite import SQLiteBackend
from conveyor.backends.sqlite.migrate import LATEST, load_migrations
from conveyor.ids import new_id
from conveyor.job import DependencyPolicy, Job, JobState

#: Statements only a batch with dependencies (or a job waited for) runs.
DEPENDENCY_MARKERS = ("job_dependencies", "SET has_dependents", "SELECT id, state")


def job(*depends_on: str, queue: str = "q") -> NewJob:
    return NewJob(id=new_id(), task="t", queue=queue, payload=b"{}", depends_on=depends_on)


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[SQLiteBackend]:
    backend = SQLiteBackend(f"sqlite:///{tmp_path}/d.db")
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


async def claim_all(backend: SQLiteBackend, count: int) -> list[Job]:
    request = ClaimRequest(worker_id="w", queues=["q"], limit=count, lease=60)
    claimed = (await backend.claim_jobs(request)).jobs
    assert len(claimed) == count
    return claimed


def completions(jobs: list[Job]) -> list[Settlement]:
    return [Settlement(j.id, j.lease_token or "", Outcome.COMPLETE, "t") for j in jobs]


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(sql).fetchall()


async def traced(backend: SQLiteBackend, statements: list[str]) -> None:
    """Record every statement the writer runs from now on."""

    def install(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(statements.append)

    await backend._writer.call(install)


async def test_plain_jobs_run_no_dependency_statement(backend: SQLiteBackend) -> None:
    statements: list[str] = []
    await traced(backend, statements)
    await backend.enqueue_jobs([job() for _ in range(20)])
    claimed = await claim_all(backend, 20)
    assert (await backend.settle_jobs(completions(claimed))).refused == set()
    assert any("INSERT INTO jobs" in s for s in statements)  # the trace sees the writer
    assert not [s for s in statements if any(m in s for m in DEPENDENCY_MARKERS)]

    # The same flow with one waited-for job does run them: the check can fail.
    (parent,) = await backend.enqueue_jobs([job()])
    (child,) = await backend.enqueue_jobs([job(parent.id)])
    claimed = await claim_all(backend, 1)
    await backend.settle_jobs(completions(claimed))
    assert [s for s in statements if "DELETE FROM job_dependencies" in s]
    assert (await backend.get_job(child.id)).state is JobState.WAITING  # type: ignore[union-attr]


async def test_dependency_rows_go_once_resolved(backend: SQLiteBackend, tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    root = job()
    left, right = job(root.id), job(root.id)
    join = job(left.id, right.id)
    tolerant = NewJob(
        id=new_id(),
        task="t",
        queue="q",
        payload=b"{}",
        depends_on=[join.id],
        on_dependency_failure=DependencyPolicy.RUN,
    )
    await backend.enqueue_jobs([root, left, right, join, tolerant])
    assert len(rows(db, "SELECT * FROM job_dependencies")) == 5
    flagged = {r[0] for r in rows(db, "SELECT id FROM jobs WHERE has_dependents = 1")}
    assert flagged == {root.id, left.id, right.id, join.id}

    await backend.settle_jobs(completions(await claim_all(backend, 1)))  # root
    assert len(rows(db, "SELECT * FROM job_dependencies")) == 3  # the join's two, tolerant's
    await backend.cancel_job(left.id)  # the join is cancelled, tolerant released
    assert rows(db, "SELECT * FROM job_dependencies") == [(right.id, join.id)]
    got = {j.id: j.state for j in await backend.get_jobs([join.id, tolerant.id])}
    assert got == {join.id: JobState.CANCELLED, tolerant.id: JobState.WAITING}
    # The join's own row goes when right finishes; nothing is left to resolve.
    claimed = [j for j in await claim_all(backend, 2) if j.id == right.id]
    await backend.settle_jobs(completions(claimed))
    assert rows(db, "SELECT * FROM job_dependencies") == []
    assert (await backend.get_job(join.id)).state is JobState.CANCELLED  # type: ignore[union-attr]


async def test_a_completion_batch_with_a_waited_for_job_settles_exactly(
    backend: SQLiteBackend,
) -> None:
    plain = [job() for _ in range(5)]
    parent = job()
    await backend.enqueue_jobs([*plain, parent])
    claimed = await claim_all(backend, 6)
    (child,) = await backend.enqueue_jobs([job(parent.id)])  # while its parent runs
    assert child.state is JobState.BLOCKED

    result = await backend.settle_jobs(completions(claimed))
    assert result.refused == set()
    states = {j.id: j.state for j in await backend.get_jobs([j.id for j in claimed])}
    assert set(states.values()) == {JobState.COMPLETED}
    released = await backend.get_job(child.id)
    assert released is not None
    assert released.state is JobState.WAITING


async def test_a_schema_3_database_upgrades_with_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for migration in load_migrations()[:3]:
            db.execute("BEGIN IMMEDIATE")
            for statement in migration.statements:
                db.execute(statement)
            db.execute("COMMIT")
        old_id = new_id()
        db.execute(
            "INSERT INTO jobs (id, task, queue, state, run_at, created_at, payload) "
            "VALUES (?, 't', 'q', 'waiting', 0, 0, X'7B7D')",
            (old_id,),
        )
    finally:
        db.close()

    backend = SQLiteBackend(f"sqlite:///{path}")
    await backend.open()
    try:
        assert rows(path, "PRAGMA user_version") == [(LATEST,)]
        old = await backend.get_job(old_id)
        assert old is not None
        assert (old.depends_on, old.on_dependency_failure, old.workflow_id) == (
            (),
            DependencyPolicy.CANCEL,
            None,
        )
        (child,) = await backend.enqueue_jobs([job(old_id)])
        assert child.state is JobState.BLOCKED
        await backend.settle_jobs(completions(await claim_all(backend, 1)))
        assert (await backend.get_job(child.id)).state is JobState.WAITING  # type: ignore[union-attr]
    finally:
        await backend.close()

"""SQLite-only sides of flow control that the conformance suite cannot see:
claims and enqueues without key_limits or debounce run none of the new
statements, several connections claiming and debouncing at once keep the caps
and one job per key, the capped claim reads indexes, and a database of schema 4
upgrades with its jobs readable."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from conveyor import serialization
from conveyor.backends.base import ClaimRequest, JobFilter, NewJob, Outcome, Settlement
from conveyor.backends.sqlite import SQLiteBackend
from conveyor.backends.sqlite.migrate import LATEST, load_migrations, load_schema
from conveyor.backends.sqlite.queries import Q
from conveyor.ids import new_id
from conveyor.job import Job, JobState

#: What only a claim with key_limits or a debounced enqueue runs.
FLOW_MARKERS = (
    "json_extract(g.value",  # claim_key_candidates
    "concurrency_key, count(*)",  # key_slots_used
    "SET payload",  # postpone_job
    "max(expires_at",  # renew_key
)


def job(key: str | None = None, **options: object) -> NewJob:
    return NewJob(
        id=new_id(),
        task="t",
        queue="q",
        payload=b"{}",
        concurrency_key=key,
        **options,  # type: ignore[arg-type]
    )


def request(limit: int, key_limits: dict[str, int] | None = None) -> ClaimRequest:
    return ClaimRequest(
        worker_id="w", queues=["q"], limit=limit, lease=60, key_limits=key_limits or {}
    )


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(sql).fetchall()


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[SQLiteBackend]:
    backend = SQLiteBackend(f"sqlite:///{tmp_path}/f.db")
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


async def opened(path: Path, count: int) -> list[SQLiteBackend]:
    """``count`` backends on one file: each its own writer connection."""
    backends = [SQLiteBackend(f"sqlite:///{path}") for _ in range(count)]
    for backend in backends:
        await backend.open()
    return backends


async def traced(backend: SQLiteBackend, statements: list[str]) -> None:
    """Record every statement the writer runs from now on."""

    def install(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(statements.append)

    await backend._writer.call(install)


async def test_plain_claims_and_enqueues_run_no_flow_statement(backend: SQLiteBackend) -> None:
    statements: list[str] = []
    await traced(backend, statements)
    await backend.enqueue_jobs([job() for _ in range(10)])
    await backend.enqueue_jobs([job(idempotency_key="k")])
    await backend.enqueue_jobs([job(idempotency_key="k")])  # a plain duplicate
    claimed = (await backend.claim_jobs(request(20))).jobs
    assert len(claimed) == 11
    assert any("UPDATE jobs" in s for s in statements)  # the trace sees the writer
    assert not [s for s in statements if any(m in s for m in FLOW_MARKERS)]

    # With a cap and a debounce they do run: the check can fail.
    await backend.enqueue_jobs([job("a", idempotency_key="d", debounce=5.0)])
    await backend.enqueue_jobs([job("a", idempotency_key="d", debounce=5.0)])
    await backend.claim_jobs(request(5, {"t": 1}))
    for marker in FLOW_MARKERS:
        assert [s for s in statements if marker in s], marker


async def test_claimers_on_several_connections_keep_every_cap(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    backends = await opened(path, 4)
    try:
        keys = ["a", "b", "c", None]
        await backends[0].enqueue_jobs([job(keys[n % 4]) for n in range(80)])

        async def claim_some(backend: SQLiteBackend) -> list[Job]:
            taken: list[Job] = []
            for _ in range(5):  # each claim sees the others' commits
                taken += (await backend.claim_jobs(request(3, {"t": 2}))).jobs
            return taken

        claimed = [j for batch in await asyncio.gather(*map(claim_some, backends)) for j in batch]
        per_key = {key: sum(1 for j in claimed if j.concurrency_key == key) for key in keys}
        assert per_key == {"a": 2, "b": 2, "c": 2, None: 2}
        active = rows(
            path,
            "SELECT concurrency_key, count(*) FROM jobs WHERE state = 'active' "
            "GROUP BY concurrency_key ORDER BY concurrency_key",
        )
        assert active == [(None, 2), ("a", 2), ("b", 2), ("c", 2)]

        # A settled job's slot is free at once for a claimer on another connection.
        done = next(j for j in claimed if j.concurrency_key == "b")
        settled = await backends[1].settle_jobs(
            [
                Settlement(
                    done.id, done.lease_token or "", Outcome.COMPLETE, "t", serialization.dumps(1)
                )
            ]
        )
        assert settled.refused == set()
        (again,) = (await backends[2].claim_jobs(request(10, {"t": 2}))).jobs
        assert again.concurrency_key == "b"
    finally:
        for backend in backends:
            await backend.close()


async def test_debounces_from_several_connections_leave_one_job(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    backends = await opened(path, 4)
    try:

        async def storm(backend: SQLiteBackend, base: int) -> set[str]:
            ids: set[str] = set()
            for n in range(10):
                new = job(idempotency_key="k", debounce=5.0)
                new.payload = serialization.dumps({"n": base + n})
                ids |= {j.id for j in await backend.enqueue_jobs([new])}
            return ids

        found = await asyncio.gather(*(storm(b, 100 * i) for i, b in enumerate(backends)))
        assert len(set().union(*found)) == 1
        assert await backends[0].count_jobs(JobFilter(idempotency_key="k")) == 1
        (stored,) = await backends[0].list_jobs(JobFilter(idempotency_key="k"))
        assert stored.state is JobState.DELAYED
    finally:
        for backend in backends:
            await backend.close()


def test_the_capped_claim_reads_indexes(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "plan.db")
    for statement in load_schema():
        db.execute(statement)
    counted = " ".join(
        row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + Q.key_slots_used, {"tasks": '["t"]'})
    )
    assert "INDEX jobs_key_active" in counted, counted
    assert "USING INDEX jobs_lease" in counted, counted
    params = {
        "queues": '["q"]',
        "now": 1.0,
        "excluded": "[]",
        "full": "[]",
        "limit": 10,
    }
    walked = " ".join(
        row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + Q.claim_key_candidates, params)
    )
    assert "SEARCH c USING INDEX jobs_claim" in walked, walked
    db.close()


async def test_a_schema_4_database_upgrades_with_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for migration in load_migrations()[:4]:
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
        assert old.concurrency_key is None
        await backend.enqueue_jobs([job("a")])
        claimed = (await backend.claim_jobs(request(10, {"t": 1}))).jobs
        assert sorted(j.concurrency_key or "" for j in claimed) == ["", "a"]
    finally:
        await backend.close()


async def test_a_dead_letter_retry_keeps_the_key(backend: SQLiteBackend) -> None:
    (stored,) = await backend.enqueue_jobs([job("a", max_attempts=1)])
    (running,) = (await backend.claim_jobs(request(1))).jobs
    failed = Settlement(running.id, running.lease_token or "", Outcome.FAIL, "t")
    assert (await backend.settle_jobs([failed])).refused == set()
    copy = await backend.retry_failed(stored.id, new_id())
    assert copy.concurrency_key == "a"
    # The copy counts in its group: with one "a" running, a cap of 1 skips the other.
    await backend.enqueue_jobs([job("a")])
    assert len((await backend.claim_jobs(request(10, {"t": 1}))).jobs) == 1

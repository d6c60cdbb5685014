"""SQLite-only behaviour the conformance suite cannot see.

URL parsing, busy handling, cross-process pickup, index-only
promotion/expiry plans, the batched settle's fallbacks, background checkpoints.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conveyor.backends.base import ClaimRequest, JobFilter, NewJob, Outcome, Settlement
from conveyor.backends.sqlite import SQLiteBackend, checkpoint, enqueue
from conveyor.backends.sqlite.queries import INLINE_MAX, Q
from conveyor.errors import BackendError, BackendUnavailable, ConfigurationError
from conveyor.ids import new_id
from conveyor.job import ErrorInfo, Job, JobState


def job(queue: str = "q") -> NewJob:
    return NewJob(id=new_id(), task="t", queue=queue, payload=b"{}")


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://host/x.db",
        "sqlite:///",
        "sqlite:///:memory:",
        "sqlite:///x.db?synchronous=sometimes",
        "sqlite:///x.db?busy_timeout=soon",
        "sqlite:///x.db?unknown=1",
        "postgresql:///x",
    ],
)
def test_bad_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(ConfigurationError, match="url"):
        SQLiteBackend(url)


def test_url_forms_and_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = SQLiteBackend("sqlite:///data/jobs.db?synchronous=full&busy_timeout=250ms")
    assert relative.options.path == tmp_path / "data" / "jobs.db"
    assert relative.options.synchronous == "FULL"
    assert relative.options.busy_timeout == 0.25
    assert SQLiteBackend("sqlite:////srv/jobs.db").options.path == Path("/srv/jobs.db")


async def test_a_held_write_lock_becomes_backend_unavailable(tmp_path: Path) -> None:
    backend = SQLiteBackend(f"sqlite:///{tmp_path}/b.db?busy_timeout=0.3")
    await backend.open()
    holder = sqlite3.connect(tmp_path / "b.db", isolation_level=None, check_same_thread=False)
    try:
        holder.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        with pytest.raises(BackendUnavailable) as caught:
            await backend.enqueue_jobs([job()])
        assert 0.25 <= time.monotonic() - started < 3
        assert "database is locked" not in str(caught.value)
        # Reads do not wait behind the writer (WAL).
        assert await backend.count_jobs(JobFilter()) == 0
        # A lock released within busy_timeout is simply waited for.
        threading.Timer(0.1, lambda: holder.execute("COMMIT")).start()
        (created,) = await backend.enqueue_jobs([job()])
        assert created.state is JobState.WAITING
    finally:
        holder.close()
        await backend.close()


async def test_the_writer_and_the_reader_run_the_blocks_of_pragmas_sql(tmp_path: Path) -> None:
    backend = SQLiteBackend(f"sqlite:///{tmp_path}/p.db?synchronous=full")
    names = ("journal_mode", "synchronous", "temp_store", "cache_size", "mmap_size")
    names += ("journal_size_limit", "wal_autocheckpoint")

    def settings(conn: sqlite3.Connection) -> tuple[object, ...]:
        return tuple(conn.execute(f"PRAGMA {name}").fetchone()[0] for name in names)

    await backend.open()
    try:
        writer = await backend._writer.call(settings)
        reader = await backend._reader.call(settings)
    finally:
        await backend.close()
    # FULL is 2, MEMORY is 2; only the writer gets writer_tuning (the reader
    # keeps SQLite's default automatic checkpoint of 1,000 pages).
    assert writer == ("wal", 2, 2, -4096, 0, 67108864, 4000)
    assert reader == ("wal", 2, 2, -2048, 0, 67108864, 1000)


async def test_closed_backend_is_unavailable(tmp_path: Path) -> None:
    backend = SQLiteBackend(f"sqlite:///{tmp_path}/c.db")
    with pytest.raises(BackendUnavailable):
        await backend.ping()
    await backend.open()
    assert await backend.ping() >= 0
    await backend.close()
    with pytest.raises(BackendUnavailable):
        await backend.get_jobs(["x"])


def test_promotion_and_expiry_are_index_searches(tmp_path: Path) -> None:
    from conveyor.backends.sqlite.migrate import load_schema

    db = sqlite3.connect(tmp_path / "plan.db")
    for statement in load_schema():
        db.execute(statement)
    for sql, index in [
        (Q.promote_due, "jobs_delayed"),
        (Q.expire_due, "jobs_expiry"),
        (Q.recover_stalled, "jobs_lease"),
    ]:
        plan = " ".join(
            row[-1]
            for row in db.execute("EXPLAIN QUERY PLAN " + sql, {"now": 1.0, "max_stalled": 3})
        )
        assert f"SEARCH jobs USING INDEX {index}" in plan, plan
    db.close()


def test_listing_walks_the_primary_key_newest_first_without_a_sort(tmp_path: Path) -> None:
    from conveyor.backends.sqlite.migrate import load_schema
    from conveyor.backends.sqlite.reads import filter_params

    db = sqlite3.connect(tmp_path / "list.db")
    for statement in load_schema():
        db.execute(statement)
    for where in (JobFilter(), JobFilter(states=[JobState.COMPLETED]), JobFilter(tenant="t")):
        params = {**filter_params(where), "limit": 10, "offset": 0}
        plan = " ".join(row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + Q.list_jobs, params))
        assert "SCAN jobs USING INDEX sqlite_autoindex_jobs_1" in plan, plan
        assert "TEMP B-TREE" not in plan, plan
    db.close()


def test_workflow_reads_search_jobs_workflow(tmp_path: Path) -> None:
    """get_workflow, the workflow events' counts and workflow retention read one
    workflow's rows through jobs_workflow (0008), not by walking every job."""
    from conveyor.backends.sqlite.migrate import load_schema
    from conveyor.backends.sqlite.reads import filter_params

    db = sqlite3.connect(tmp_path / "workflow.db")
    for statement in load_schema():
        db.execute(statement)
    where = JobFilter(workflow_id="wf", states=[JobState.WAITING, JobState.BLOCKED])
    params = {**filter_params(where), "limit": 10, "offset": 0}
    ids = {"ids": '["wf"]'}
    for sql, args in [
        (Q.list_workflow_jobs, params),
        (Q.count_workflow_jobs, filter_params(where)),
        (Q.workflow_rows, ids),
        (Q.delete_workflows, ids),
    ]:
        plan = " ".join(row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + sql, args))
        assert re.search(
            r"SEARCH jobs USING (COVERING )?INDEX jobs_workflow \(workflow_id=\?", plan
        ), plan
        assert "TEMP B-TREE" not in plan, plan
    plan = " ".join(row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + Q.finished_workflows))
    assert "jobs USING INDEX jobs_workflow" in plan, plan  # in workflow_id order
    assert "TEMP B-TREE" not in plan, plan
    db.close()


_PRODUCER = textwrap.dedent(
    """
    import asyncio, sys, time
    from conveyor.backends.base import NewJob
    from conveyor.backends.sqlite import SQLiteBackend
    from conveyor.ids import new_id

    async def main() -> None:
        backend = SQLiteBackend(sys.argv[1])
        await backend.open()
        for _ in range(10):
            await asyncio.sleep(0.1)
            payload = ('{"t": %r}' % time.time()).encode()
            await backend.enqueue_jobs(
                [NewJob(id=new_id(), task="t", queue="q", payload=payload)]
            )
        await backend.close()

    asyncio.run(main())
    """
)


async def test_another_process_enqueue_is_picked_up_within_50ms(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/p.db"
    backend = SQLiteBackend(url)
    await backend.open()
    producer = await asyncio.create_subprocess_exec(sys.executable, "-c", _PRODUCER, url)
    latencies: list[float] = []
    request = ClaimRequest(worker_id="w", queues=["q"], limit=10, lease=60)
    try:
        deadline = time.monotonic() + 30
        while len(latencies) < 10 and time.monotonic() < deadline:
            result = await backend.claim_jobs(request)
            now = time.time()
            latencies += [now - j.payload["t"] for j in result.jobs]
            if not result.jobs:
                await backend.wait_for_work(["q"], 1.0)
    finally:
        await asyncio.wait_for(producer.wait(), 30)
        await backend.close()
    assert len(latencies) == 10
    latencies.sort()
    assert latencies[5] < 0.05, latencies


async def _claimed(backend: SQLiteBackend, count: int, queue: str = "q") -> list[Job]:
    await backend.enqueue_jobs([job(queue) for _ in range(count)])
    request = ClaimRequest(worker_id="w", queues=[queue], limit=count, lease=60)
    claimed = (await backend.claim_jobs(request)).jobs
    assert len(claimed) == count
    return claimed


async def test_a_batch_of_completions_refuses_exactly_the_stale_ones(tmp_path: Path) -> None:
    """The one-statement COMPLETE path falls back to the exact one on a refusal."""
    backend = SQLiteBackend(f"sqlite:///{tmp_path}/s.db")
    await backend.open()
    try:
        a, b, c, d = await _claimed(backend, 4)
        (never,) = await backend.enqueue_jobs([job()])
        batch = [
            Settlement(a.id, a.lease_token or "", Outcome.COMPLETE, "t", result=b'{"r": 1}'),
            Settlement(b.id, "stale-token", Outcome.COMPLETE, "t", result=b"2"),
            Settlement(c.id, c.lease_token or "", Outcome.COMPLETE, "t", progress=b'{"p": 3}'),
            Settlement(never.id, "no-token", Outcome.COMPLETE, "t", result=b"4"),
        ]
        result = await backend.settle_jobs(batch)
        assert result.refused == {b.id, never.id}
        got = {j.id: j for j in await backend.get_jobs([a.id, b.id, c.id, d.id, never.id])}
        assert got[a.id].state is JobState.COMPLETED
        assert got[a.id].result == {"r": 1}
        assert got[a.id].lease_token is None
        assert got[a.id].finished_at is not None
        assert got[c.id].state is JobState.COMPLETED
        assert got[c.id].progress == {"p": 3}
        assert got[b.id].state is JobState.ACTIVE
        assert got[b.id].lease_token == b.lease_token
        assert got[never.id].state is JobState.WAITING
        assert got[d.id].state is JobState.ACTIVE
    finally:
        await backend.close()


async def test_mixed_outcomes_repeated_ids_and_big_results_in_one_batch(tmp_path: Path) -> None:
    backend = SQLiteBackend(f"sqlite:///{tmp_path}/m.db")
    await backend.open()
    try:
        a, b, c, d = await _claimed(backend, 4)
        await backend.cancel_job(c.id)  # a cancel request wins over the retry below
        big = b'"' + b"x" * (INLINE_MAX + 10) + b'"'
        error = ErrorInfo("Boom", "no", attempt=1)
        result = await backend.settle_jobs(
            [
                Settlement(a.id, a.lease_token or "", Outcome.COMPLETE, "t", result=b"1"),
                Settlement(b.id, b.lease_token or "", Outcome.RETRY, "t", error=error),
                Settlement(c.id, c.lease_token or "", Outcome.RETRY, "t", error=error),
                Settlement(d.id, d.lease_token or "", Outcome.COMPLETE, "t", result=big),
            ]
        )
        assert result.refused == set()
        assert result.cancelled == {c.id}
        got = {j.id: j for j in await backend.get_jobs([a.id, b.id, c.id, d.id])}
        assert got[a.id].state is JobState.COMPLETED
        assert got[a.id].result == 1
        assert got[b.id].state is JobState.DELAYED
        assert got[b.id].errors[-1].type == "Boom"
        assert got[c.id].state is JobState.CANCELLED
        assert got[d.id].result == "x" * (INLINE_MAX + 10)

        (e,) = await _claimed(backend, 1)
        token = e.lease_token or ""
        twice = await backend.settle_jobs(
            [
                Settlement(e.id, "wrong", Outcome.COMPLETE, "t", result=b"0"),
                Settlement(e.id, token, Outcome.COMPLETE, "t", result=b"1"),
                Settlement(e.id, token, Outcome.COMPLETE, "t", result=b"2"),
            ]
        )
        assert twice.refused == {e.id}
        assert (await backend.get_jobs([e.id]))[0].result == 1  # the first that held the lease
    finally:
        await backend.close()


async def test_checkpoints_run_in_the_background_and_the_wal_stays_bounded(
    tmp_path: Path,
) -> None:
    backend = SQLiteBackend(f"sqlite:///{tmp_path}/w.db")
    await backend.open()
    try:
        for _ in range(4):
            await backend.enqueue_jobs([job() for _ in range(checkpoint.CHECKPOINT_EVERY)])
        request = ClaimRequest(worker_id="w", queues=["q"], limit=200, lease=60)
        while claimed := (await backend.claim_jobs(request)).jobs:
            await backend.settle_jobs(
                [Settlement(j.id, j.lease_token or "", Outcome.COMPLETE, "t") for j in claimed]
            )
        for _ in range(1000):  # the checkpointer thread runs on its own: up to 10 s
            if backend._checkpointer.checkpoints:
                break
            await asyncio.sleep(0.01)
        assert backend._checkpointer.checkpoints > 0
        # The WAL file never grew past the writer's backstop (4,000 pages + a batch).
        wal = (tmp_path / "w.db-wal").stat().st_size
        assert 0 < wal <= (4000 + 1000) * (4096 + 24), wal
    finally:
        await backend.close()
    assert backend._checkpointer._thread is None  # stopped with the backend


async def test_a_run_of_plain_jobs_stores_every_payload_byte_for_byte(tmp_path: Path) -> None:
    """Runs of jobs without options travel as one JSON parameter; the stored
    payloads are the exact bytes given, as BLOBs, whatever they contain."""
    backend = SQLiteBackend(f"sqlite:///{tmp_path}/p.db")
    await backend.open()
    payloads = [
        b"null",
        b'{"quote": "\\"", "slash": "\\\\", "nl": "\\n", "u": "\\u00e9"}',
        '{"raw": "é ☃ 😀 \\t"}'.encode(),
        b'  [1, 2.50, 1e400, "spaces kept"]  ',
        b"\xff\xfe not utf-8",  # corrupt: stored as given, decoded as an error
        b'{"nul": "\x00"}',
        b'"' + b"y" * (INLINE_MAX + 1) + b'"',
        *(f'{{"i": {i}}}'.encode() for i in range(enqueue.RUN_MIN)),
    ]
    jobs = [NewJob(id=new_id(), task="t", queue="q", payload=p, max_attempts=5) for p in payloads]
    jobs.append(NewJob(id=new_id(), task="t", queue="q", payload=b"{}", timeout=3.0))
    try:
        created = await backend.enqueue_jobs(jobs)
        assert [j.id for j in created] == [j.id for j in jobs]
        assert created[4].decode_error is not None
        assert created[1].payload == {"quote": '"', "slash": "\\", "nl": "\n", "u": "é"}
        with sqlite3.connect(tmp_path / "p.db") as db:
            stored = dict(db.execute("SELECT id, payload FROM jobs"))
            kinds = {kind for (kind,) in db.execute("SELECT DISTINCT typeof(payload) FROM jobs")}
            shared = set(db.execute("SELECT task, queue, state, max_attempts FROM jobs"))
        assert stored == {j.id: j.payload for j in jobs}
        assert kinds == {"blob"}
        assert shared == {("t", "q", "waiting", 5), ("t", "q", "waiting", 3)}
        got = {j.id: j for j in await backend.get_jobs([j.id for j in jobs])}
        assert got[jobs[2].id].payload == {"raw": "é ☃ 😀 \t"}
        assert got[jobs[-1].id].timeout == 3.0
    finally:
        await backend.close()


async def test_an_id_repeated_in_a_run_of_plain_jobs_fails_the_whole_batch(tmp_path: Path) -> None:
    """A run's ids travel as the keys of one JSON object: an id given twice must
    still fail the batch on the primary key, not collapse into one job."""
    backend = SQLiteBackend(f"sqlite:///{tmp_path}/d.db")
    await backend.open()
    jobs = [NewJob(id=new_id(), task="t", queue="q", payload=b"{}") for _ in range(enqueue.RUN_MIN)]
    jobs.append(NewJob(id=jobs[0].id, task="t", queue="q", payload=b'{"again": 1}'))
    try:
        with pytest.raises(BackendError):
            await backend.enqueue_jobs(jobs)
        assert await backend.count_jobs(JobFilter()) == 0
    finally:
        await backend.close()

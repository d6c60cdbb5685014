"""The worker's stats reporter: runs aggregated in memory, flushed to the
backend; a failed flush keeps its counts for the next one."""

from __future__ import annotations

import asyncio
from pathlib import Path

from conveyor.backends.base import DURATION_BUCKETS, Outcome
from conveyor.backends.sqlite import SQLiteBackend
from conveyor.worker.stats import StatsReporter

from .conftest import make_app


async def test_counts_reach_the_backend_only_when_flushed(tmp_path: Path) -> None:
    backend = SQLiteBackend(f"sqlite:///{tmp_path / 'stats.db'}")
    await backend.open()
    try:
        reporter = StatsReporter(backend, interval=60)
        reporter.add_outcome("t", "q", Outcome.COMPLETE, 0.003)
        reporter.add_outcome("t", "q", Outcome.COMPLETE, 0.2)
        reporter.add_outcome("t", "q", Outcome.RETRY, 1.0)
        reporter.add_outcome("t", "q", Outcome.RELEASE, 9.0)  # not a finished run
        assert reporter.pending == 3
        assert await backend.job_stat_totals() == []

        assert await reporter.flush()
        assert reporter.pending == 0
        totals = {s.status: s for s in await backend.job_stat_totals()}
        assert set(totals) == {"completed", "retried"}
        done = totals["completed"]
        assert done.count == 2
        assert done.buckets[0] == 1  # 3 ms <= 5 ms
        assert done.buckets[DURATION_BUCKETS.index(0.25)] == 1

        await backend.close()  # the backend is gone: the counts wait in memory
        reporter.add_outcome("t", "q", Outcome.FAIL, 0.01)
        assert not await reporter.flush()
        reporter.add_outcome("t", "q", Outcome.FAIL, 0.01)
        assert reporter.pending == 2
        await backend.open()
        assert await reporter.flush()
        totals = {s.status: s for s in await backend.job_stat_totals()}
        assert totals["failed"].count == 2
        assert totals["completed"].count == 2  # nothing counted twice
    finally:
        await backend.close()


async def test_a_worker_reports_every_outcome_at_shutdown(tmp_path: Path) -> None:
    app = make_app(f"sqlite:///{tmp_path / 'jobs.db'}", stats_flush_interval=3600)
    async with app:
        await app.enqueue_many([("add", {"a": i, "b": i}) for i in range(5)])
        await app.enqueue("fail")
        await app.enqueue("add", {"a": 1, "b": 1}, ttl=0.001)
        await app.enqueue("mail.send", {"to": "x"})
        await asyncio.sleep(0.05)  # the TTL'd job expires before any claim
        await app.drain()
        totals = {(s.task, s.queue, s.status): s.count for s in await app.backend.job_stat_totals()}
    assert totals[("add", "default", "completed")] == 5
    assert totals[("add", "default", "expired")] == 1
    assert totals[("fail", "default", "failed")] == 1
    assert totals[("mail.send", "emails", "completed")] == 1
    assert sum(totals.values()) == 8

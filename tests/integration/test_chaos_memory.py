"""Memory growth: a worker past ``max_worker_rss`` stops claiming, finishes
what it runs, gives its prefetched jobs back and exits 75; the supervisor
(``--processes 1``) starts a fresh one at once. Nothing is lost or run twice,
and no attempt is spent by a recycle."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from chaos_helpers import CHAOS_STORES, Cluster, report

from conveyor.job import JobState
from conveyor.worker.memory import RECYCLE_EXIT

pytestmark = pytest.mark.slow

JOBS = 30
#: A worker of the chaos app starts near 50 MB resident; each job leaks 12 MB,
#: so a worker passes the limit after a handful of jobs.
LIMIT = "100MB"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("store", CHAOS_STORES)
async def test_worker_past_max_rss_is_recycled(tmp_path: Path, store: str) -> None:
    async with Cluster(tmp_path, store) as cluster:
        app = await cluster.app()
        jobs = [await app.enqueue("chaos.hog", {"mb": 12, "seconds": 0.2}) for _ in range(JOBS)]
        ids = [job.id for job in jobs]
        supervisor = cluster.start_worker(
            2, env={"CONVEYOR_MAX_WORKER_RSS": LIMIT}, extra=["--processes", "1"]
        )

        async def drained() -> bool:
            return await app.count_jobs(JobState.COMPLETED) >= JOBS

        await cluster.wait_until(drained, 90, "the hog jobs did not all complete", 0.2)
        supervisor.signal(signal.SIGTERM)
        assert await supervisor.wait_exit(30, "after SIGTERM") == 0, supervisor.tail(40)

        log = supervisor.err()
        recycles = log.count("exited to be recycled")
        stored = [await app.get_job(job_id) for job_id in ids]
        unfinished = [j for j in stored if j is None or j.state is not JobState.COMPLETED]
        counts = cluster.run_counts()
        duplicated = [job_id for job_id in ids if counts[job_id] > 1]
        pids = {j.result["pid"] for j in stored if j is not None and j.result}
        report(
            "worker past max_worker_rss, recycled",
            store,
            jobs=JOBS,
            faults=recycles,
            lost=len(unfinished),
            duplicated=len(duplicated),
            bound=0,
            passed=recycles >= 1 and not unfinished and not duplicated,
        )
        assert recycles >= 1, f"no worker was recycled\n{supervisor.tail(60)}"
        assert "past max_worker_rss" in log, supervisor.tail(60)
        assert f"exited with code {RECYCLE_EXIT}" not in log  # not treated as a crash
        assert "restarting it in" not in log, "a recycle went through the crash backoff"
        assert not unfinished, f"{len(unfinished)} job(s) not completed (G1)"
        assert not duplicated, f"{len(duplicated)} job(s) ran twice: {duplicated[:5]}"
        assert all(counts[job_id] == 1 for job_id in ids)
        # Prefetched jobs were given back with their attempt: none was spent twice.
        assert {j.attempts for j in stored if j is not None} == {1}
        assert len(pids) >= 2, f"one process ran every job: {pids}"

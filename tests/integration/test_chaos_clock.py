"""Chaos: a worker whose clock is an hour off (G11 one clock, G4 leases).

One worker process runs under libfaketime (``LD_PRELOAD``, ``FAKETIME=+1h``
or ``-1h``: its ``time.time()`` is an hour ahead or behind), another on the
host's clock, both on one PostgreSQL schema or Redis prefix, with leases
short enough that every job outlives its first lease and must be renewed.

- No delayed job starts before its ``run_at`` by the store's clock: a worker an
  hour ahead comparing with its own clock would start them at once.
- No lease is wrongly recovered: had a worker stamped leases with its own
  clock, the worker behind would see its peer's leases an hour from expiry
  (and never recover a dead one), or the worker ahead would see the peer's
  leases expired and take its jobs while they run. Every job runs exactly
  once, with no stall counted.

SQLite is not here: its store takes the time from the writing process's
clock (G11's limits), so a skewed process on one SQLite file does move
leases and delays; one host has one clock.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chaos_helpers import Cluster, Proc, get_jobs, report

from conveyor.job import JobState
from support.services import missing_service

pytestmark = pytest.mark.slow

#: Where Debian's ``faketime`` package puts the library (the thread-safe build).
LIBFAKETIME = "faketime/libfaketimeMT.so.1"
#: Each job outlives several leases: renewed, never recovered.
LEASE = {"CONVEYOR_LEASE": "1s", "CONVEYOR_STALL_INTERVAL": "0.3s", "CONVEYOR_PREFETCH": "0"}
JOB_SECONDS = 3.0
JOBS = 12
DELAYED = 6
DELAY = 4.0
#: How far the skewed worker's clock must be seen off: it is an hour.
SKEW_SEEN = 3000


def libfaketime() -> str:
    found = sorted(Path("/usr/lib").glob(f"*/{LIBFAKETIME}")) + sorted(
        Path("/usr/lib").glob(LIBFAKETIME)
    )
    if not found:
        missing_service("libfaketime is not installed (apt-get install faketime)")
    return str(found[0])


def skewed(offset: str) -> dict[str, str]:
    """The environment that runs a process ``offset`` (``+1h``) off the host clock."""
    return {
        "LD_PRELOAD": libfaketime(),
        "FAKETIME": offset,
        "FAKETIME_DONT_RESET": "1",
        **LEASE,
    }


async def run_worker_skew(cluster: Cluster, offset: str) -> tuple[Proc, Proc]:
    # Half the long jobs each: both hold leases the other could take.
    skewed_worker = cluster.start_worker(JOBS // 2, env=skewed(offset), name="skewed")
    honest = cluster.start_worker(JOBS // 2, env=LEASE, name="honest")
    for proc in (skewed_worker, honest):
        await cluster.wait_until(lambda p=proc: " started: " in p.err(), 60, f"{proc.name} started")
    return skewed_worker, honest


@pytest.mark.timeout(180)
@pytest.mark.parametrize("offset", ["+1h", "-1h"])
@pytest.mark.parametrize("store", ["postgres", "redis"])
async def test_a_worker_an_hour_off_starts_nothing_early_and_steals_no_lease(
    tmp_path: Path, store: str, offset: str
) -> None:
    async with Cluster(tmp_path, store) as cluster:
        app = await cluster.app()
        skewed_worker, honest = await run_worker_skew(cluster, offset)
        long_jobs = await app.enqueue_many([("chaos.sleep", {"seconds": JOB_SECONDS}, None)] * JOBS)
        delayed = await app.enqueue_many(
            [("chaos.sleep", {"seconds": 0.0}, {"delay": DELAY})] * DELAYED
        )
        ids = [job.id for job in [*long_jobs, *delayed]]

        async def all_completed() -> bool:
            jobs = await get_jobs(app, ids)
            return all(job.state is JobState.COMPLETED for job in jobs.values())

        await cluster.wait_until(all_completed, 90, "not every job completed", interval=0.2)
        jobs = await get_jobs(app, ids)
        runs = cluster.runs()
        counts = cluster.run_counts()
        pids = {proc.pid: proc.name for proc in (skewed_worker, honest)}
        ran_by = {pids.get(run.pid, "?").split("#")[0] for run in runs}
        # The skewed process really is an hour off: its run records (its own
        # time.time()) are, next to the honest one's.
        now = time.time()
        skew = [run.started - now for run in runs if run.pid == skewed_worker.pid]
        early = [
            job.id
            for job in (jobs[d.id] for d in delayed)
            if job.started_at is None or job.started_at < job.run_at
        ]
        too_soon = [
            job.id
            for job in (jobs[d.id] for d in delayed)
            if job.started_at is not None and job.started_at - job.created_at < DELAY - 0.05
        ]
        recovered = [job.id for job in jobs.values() if job.stalls or job.attempts != 1]
        duplicated = sum(1 for job_id in ids if counts[job_id] > 1)
        passed = not (early or too_soon or recovered or duplicated) and len(jobs) == len(ids)
        report(
            f"worker clock {offset} (faketime)",
            store,
            jobs=len(ids),
            faults=1,
            lost=len(ids) - len(jobs),
            duplicated=duplicated,
            bound=0,
            passed=passed,
            note=f"{len(recovered)} leases recovered, {len(early) + len(too_soon)} started early",
        )
        assert ran_by == {"skewed", "honest"}, f"only {ran_by} ran jobs: no lease to steal"
        assert skew, "the skewed worker recorded no run"
        assert all(abs(s) > SKEW_SEEN for s in skew), f"the worker was not skewed: {skew[:3]}"
        assert not early, f"{len(early)} delayed job(s) started before their run_at"
        assert not too_soon, f"{len(too_soon)} delayed job(s) started before their delay"
        assert not recovered, f"{len(recovered)} job(s) recovered from a live worker (G4)"
        assert duplicated == 0, f"{duplicated} job(s) ran twice"
        for proc in (skewed_worker, honest):
            assert proc.alive, proc.tail()


def test_libfaketime_skews_a_child_process() -> None:
    """The harness itself: a child under :func:`skewed` sees the clock an hour ahead."""
    env = {**os.environ, **skewed("+1h")}
    out = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert float(out.stdout) - time.time() > SKEW_SEEN

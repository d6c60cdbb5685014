"""Chaos: a worker whose clock is an hour off, or jumps while it runs (G11 one
clock, G4 leases).

One worker process runs under libfaketime (``LD_PRELOAD``, ``FAKETIME=+1h``
or ``-1h``: its ``time.time()`` is an hour ahead or behind), another on the
host's clock, both on one PostgreSQL schema or Redis prefix, with leases
short enough that every job outlives its first lease and must be renewed.
In the jump test the worker's wall clock instead follows a timestamp file the
test rewrites mid-run (``+0``, ``+1h``, ``-1h``, ``+0``: an NTP step, or an
operator's ``date -s``), its monotonic clock untouched; jobs started in one
phase renew their leases across the next jump.

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

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chaos_helpers import Cluster, Proc, get_jobs, report

from conveyor.job import Job, JobState
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
#: The jumping worker's wall clock, phase by phase.
JUMPS = ("+1h", "-1h", "+0")
#: How long each phase runs after its jobs are enqueued: they outlast it.
JUMP_PHASE = 2.0
#: Delayed jobs of a phase fall due in the next one.
JUMP_DELAY = 2.5
#: Time for the jumping worker to take up the phase's clock before its jobs come.
FAKETIME_REREAD = 0.3


def libfaketime() -> str:
    found = sorted(Path("/usr/lib").glob(f"*/{LIBFAKETIME}")) + sorted(
        Path("/usr/lib").glob(LIBFAKETIME)
    )
    if not found:
        missing_service("libfaketime is not installed (apt-get install faketime)")
    return str(found[0])


def jumping(timestamp_file: Path) -> dict[str, str]:
    """A process whose wall clock follows the offset in ``timestamp_file``
    (re-read at every call: the jump is immediate) while its monotonic clock
    runs true."""
    return {
        "LD_PRELOAD": libfaketime(),
        "FAKETIME_TIMESTAMP_FILE": str(timestamp_file),
        "FAKETIME_NO_CACHE": "1",
        # A stepped wall clock never moves the monotonic one. (libfaketime
        # 0.9.10 then fails time.sleep() with EINVAL; the worker never calls it
        # on PostgreSQL or Redis.)
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        **LEASE,
    }


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
        await cluster.app()  # migrates before the workers start
        skewed_worker, honest = await run_worker_skew(cluster, offset)
        long_jobs, delayed = await enqueue_round(cluster, DELAY)
        jobs = await judge(
            cluster, long_jobs, delayed, skewed_worker, honest, f"worker clock {offset} (faketime)"
        )
        # The skewed process really is an hour off: its run records (its own
        # time.time()) are, next to the honest one's.
        now = time.time()
        skew = [run.started - now for run in cluster.runs() if run.pid == skewed_worker.pid]
        assert skew, "the skewed worker recorded no run"
        assert all(abs(s) > SKEW_SEEN for s in skew), f"the worker was not skewed: {skew[:3]}"
        assert len(jobs) == len(long_jobs) + len(delayed)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("store", ["postgres", "redis"])
async def test_a_worker_whose_clock_jumps_while_it_runs_starts_nothing_early(
    tmp_path: Path, store: str
) -> None:
    """The jumping worker's wall clock steps an hour ahead, then an hour behind,
    then back, while it runs jobs (its monotonic clock runs on, as when NTP or
    an operator steps the clock): each phase starts jobs and renews leases
    taken in the one before."""
    timestamp_file = tmp_path / "faketime.rc"
    timestamp_file.write_text("+0\n")
    async with Cluster(tmp_path, store) as cluster:
        await cluster.app()  # migrates before the workers start
        jumper = cluster.start_worker(JOBS // 2, env=jumping(timestamp_file), name="jumping")
        honest = cluster.start_worker(JOBS // 2, env=LEASE, name="honest")
        for proc in (jumper, honest):
            await cluster.wait_until(
                lambda p=proc: " started: " in p.err(), 60, f"{proc.name} started"
            )
        long_jobs: list[Job] = []
        delayed: list[Job] = []
        for offset in JUMPS:
            timestamp_file.write_text(f"{offset}\n")
            await asyncio.sleep(FAKETIME_REREAD)
            more_long, more_delayed = await enqueue_round(cluster, JUMP_DELAY)
            long_jobs += more_long
            delayed += more_delayed
            await asyncio.sleep(JUMP_PHASE)
        jobs = await judge(
            cluster, long_jobs, delayed, jumper, honest,
            "worker clock jumps +1h, -1h, back (faketime)", faults=len(JUMPS),
        )  # fmt: skip
        # The worker's clock did jump: its runs' own start times sit an hour
        # ahead of, an hour behind and level with the store's, by phase.
        seen = {
            round((run.started - (jobs[run.job_id].started_at or 0)) / 3600)
            for run in cluster.runs()
            if run.pid == jumper.pid
        }
        assert {1, -1} <= seen, f"the jumping worker's clock was never +1h and -1h: {seen}"


async def enqueue_round(cluster: Cluster, delay: float) -> tuple[list[Job], list[Job]]:
    """Long jobs that outlive several leases, and delayed ones due in ``delay``."""
    app = await cluster.app()
    long_jobs = await app.enqueue_many([("chaos.sleep", {"seconds": JOB_SECONDS}, None)] * JOBS)
    delayed = await app.enqueue_many(
        [("chaos.sleep", {"seconds": 0.0}, {"delay": delay})] * DELAYED
    )
    return long_jobs, delayed


async def judge(
    cluster: Cluster,
    long_jobs: list[Job],
    delayed: list[Job],
    skewed_worker: Proc,
    honest: Proc,
    fault: str,
    faults: int = 1,
) -> dict[str, Job]:
    """Wait for every job, report the row, and assert G11/G4: nothing started
    early by the store's clock, no lease recovered, nothing run twice."""
    app = await cluster.app()
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
    delay_of = {d.id: d.run_at - d.created_at for d in delayed}
    early = [
        job.id
        for job in (jobs[d.id] for d in delayed)
        if job.started_at is None or job.started_at < job.run_at
    ]
    too_soon = [
        job.id
        for job in (jobs[d.id] for d in delayed)
        if job.started_at is not None and job.started_at - job.created_at < delay_of[job.id] - 0.05
    ]
    recovered = [job.id for job in jobs.values() if job.stalls or job.attempts != 1]
    duplicated = sum(1 for job_id in ids if counts[job_id] > 1)
    passed = not (early or too_soon or recovered or duplicated) and len(jobs) == len(ids)
    report(
        fault,
        cluster.store,
        jobs=len(ids),
        faults=faults,
        lost=len(ids) - len(jobs),
        duplicated=duplicated,
        bound=0,
        passed=passed,
        note=f"{len(recovered)} leases recovered, {len(early) + len(too_soon)} started early",
    )
    assert ran_by == {skewed_worker.name.split("#")[0], "honest"}, (
        f"only {ran_by} ran jobs: no lease to steal"
    )
    assert not early, f"{len(early)} delayed job(s) started before their run_at"
    assert not too_soon, f"{len(too_soon)} delayed job(s) started before their delay"
    assert not recovered, f"{len(recovered)} job(s) recovered from a live worker (G4)"
    assert duplicated == 0, f"{duplicated} job(s) ran twice"
    for proc in (skewed_worker, honest):
        assert proc.alive, proc.tail()
    return jobs


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

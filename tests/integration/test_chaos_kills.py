"""Chaos on every store: workers SIGKILLed again and again with jitter, alone
or as children of ``--processes N``, while a producer enqueues (G1 no loss,
G2 duplicates only among jobs a killed worker held).

Each kill is followed at once by a snapshot of the jobs the killed worker
held (active, its worker id): the leases are 2 s, renewed every 0.7 s, so no
other worker can have recovered them yet. Every job that ran twice must be
in a snapshot, and every run but the one whose result was stored must be by
a killed process.

CI runs a few seconds of kills per store; ``CONVEYOR_CHAOS_LONG=1`` (the
chaos script) runs minutes.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import time
from collections import Counter, defaultdict
from contextlib import closing
from pathlib import Path

import pytest
from chaos_apps.recorder import Run
from chaos_helpers import (
    CHAOS_STORES,
    Cluster,
    Proc,
    descendants,
    get_jobs,
    long_run,
    producer_argv,
    report,
)

from conveyor.app import Conveyor
from conveyor.job import Job, JobState

pytestmark = pytest.mark.slow

#: Long enough that a sibling's stall reaper cannot recover a killed worker's
#: jobs between the SIGKILL and the snapshot; short enough to recover quickly.
KILL_LEASE = {"CONVEYOR_LEASE": "2s", "CONVEYOR_MAX_STALLED": "1000"}
#: A job a killed worker held (prefetched, say) can be held by the next killed
#: worker too: minutes of kills would dead-letter it as poison (G5, max_stalled
#: 3). These kills are not the job's fault, so every worker here forgives them.
RESCUER = {"CONVEYOR_MAX_STALLED": "1000"}
#: Attempts are spent at claim (G5), prefetched or running: minutes of kills
#: let three killed workers in a row hold the same job, which then fails
#: ``stalled`` with no attempt left (the poison bound doing its job on a job
#: that is no poison). The producer gives every job as many attempts as the
#: workers forgive stalls.
ATTEMPTS = 1000


def kill_seconds() -> float:
    """3 s in CI; ``CONVEYOR_CHAOS_SECONDS`` (default 60) in the long variant."""
    return float(os.environ.get("CONVEYOR_CHAOS_SECONDS", "60")) if long_run() else 3.0


def job_count() -> int:
    # Enough 50 ms jobs that the workers never run dry while they are killed.
    return int(kill_seconds() * 250) if long_run() else 1_500


def worker_ids_of(runs_dir: Path, pid: int) -> set[str]:
    """The worker ids process ``pid`` recorded runs under (one, normally)."""
    path = runs_dir / f"runs-{pid}.sqlite"
    if not path.exists():
        return set()
    with closing(sqlite3.connect(path, timeout=10)) as db:
        try:
            return {row[0] for row in db.execute("SELECT DISTINCT worker_id FROM runs")}
        except sqlite3.OperationalError:
            return set()  # the table is not created yet


async def held_by(app: Conveyor, worker_ids: set[str]) -> set[str]:
    """Ids of the jobs still active under one of ``worker_ids``."""
    active = await app.list_jobs(JobState.ACTIVE, limit=100_000)
    return {job.id for job in active if job.worker_id in worker_ids}


async def wait_recording(cluster: Cluster, pid: int, timeout: float = 30.0) -> None:
    """Until process ``pid`` has started at least one run (so a kill lands mid-work)."""
    path = cluster.runs_dir / f"runs-{pid}.sqlite"
    await cluster.wait_until(path.exists, timeout, f"process {pid} never ran a job")


class KillLog:
    """What the kills did: the killed pids and the jobs they held."""

    def __init__(self) -> None:
        self.pids: set[int] = set()
        self.held: set[str] = set()
        self.kills = 0

    async def kill(self, cluster: Cluster, app: Conveyor, pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)  # each worker leads its own group
        except ProcessLookupError:
            return
        await cluster.wait_until(
            lambda: not Path(f"/proc/{pid}").exists() or is_zombie(pid),
            10,
            f"process {pid} survived SIGKILL",
        )
        self.kills += 1
        self.pids.add(pid)
        self.held |= await held_by(app, worker_ids_of(cluster.runs_dir, pid))


def is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def describe_unfinished(
    stored: dict[str, Job], unfinished: list[str], log: KillLog, cluster: Cluster
) -> str:
    """Where the unfinished jobs are: by state, and for active ones whether
    their worker is a killed one (a lease nobody recovered) or a live one."""
    killed_ids: set[str] = set()
    for pid in log.pids:
        killed_ids |= worker_ids_of(cluster.runs_dir, pid)
    states: Counter[str] = Counter()
    for job_id in unfinished:
        job = stored[job_id]
        where = job.state.value
        if job.state is JobState.ACTIVE:
            where += " (killed worker)" if job.worker_id in killed_ids else f" ({job.worker_id})"
        states[where] += 1
    sample = [
        f"{j.id} {j.state.value} attempts={j.attempts} stalls={j.stalls} reason={j.failure_reason} "
        f"run_at={j.run_at} error={j.error.message if j.error else None}"
        for j in (stored[job_id] for job_id in unfinished[:5])
    ]
    return f"{dict(states)}; e.g.\n  " + "\n  ".join(sample)


def read_acked(path: Path) -> list[str]:
    """The job ids the producer acknowledged, one a line."""
    return path.read_text().split()


async def check_and_report(
    cluster: Cluster, app: Conveyor, acked_path: Path, log: KillLog, fault: str
) -> None:
    """Wait for the drain, then G1 and G2 from the store and the recorder."""
    acked = read_acked(acked_path)
    total = len(acked)

    async def drained() -> bool:
        return await app.count_jobs(JobState.COMPLETED) >= total

    # When the kills stop, every child of --processes may sit in the
    # supervisor's restart backoff (at most 30 s, its documented maximum):
    # the drain gets that on top of a generous margin.
    try:
        await cluster.wait_until(
            drained, max(120.0, kill_seconds() * 2), "not every acknowledged job completed", 0.25
        )
    except AssertionError as exc:
        print(exc)
    stored = await get_jobs(app, acked)
    lost = [job_id for job_id in acked if job_id not in stored]
    unfinished = [j.id for j in stored.values() if j.state is not JobState.COMPLETED]
    runs_of: dict[str, list[Run]] = defaultdict(list)
    for run in cluster.runs():
        runs_of[run.job_id].append(run)
    never_ran = [job_id for job_id in acked if not runs_of[job_id]]
    duplicated = {job_id for job_id, runs in runs_of.items() if len(runs) > 1}
    # Every run but the stored one must be by a process we killed.
    stray = [
        job_id
        for job_id in duplicated
        if job_id in stored
        and stored[job_id].result is not None
        and any(
            run.pid != stored[job_id].result["pid"] and run.pid not in log.pids
            for run in runs_of[job_id]
        )
    ]
    outside = duplicated - log.held
    passed = not (lost or unfinished or never_ran or stray or outside) and log.kills > 0
    report(
        fault,
        cluster.store,
        jobs=total,
        faults=log.kills,
        lost=len(lost) + len(unfinished),
        duplicated=len(duplicated),
        bound=len(log.held),
        passed=passed,
    )
    assert log.kills > 0, "no worker was killed: the test proved nothing"
    assert total > 0, "the producer acknowledged nothing"
    assert not lost, f"{len(lost)} acknowledged enqueue(s) are not in the store (G1)"
    assert not unfinished, (
        f"{len(unfinished)} job(s) never completed: "
        f"{describe_unfinished(stored, unfinished, log, cluster)}\n{cluster.tails()}"
    )
    assert not never_ran, f"{len(never_ran)} completed job(s) have no recorded run"
    assert not stray, f"{len(stray)} job(s) ran twice outside a killed worker: {stray[:5]}"
    assert not outside, (
        f"{len(outside)} job(s) ran twice that no killed worker held (G2): {sorted(outside)[:5]}"
    )
    assert await app.count_jobs() == total, "jobs appeared or vanished"


@pytest.mark.timeout(kill_seconds() * 4 + 150)
@pytest.mark.parametrize("store", CHAOS_STORES)
async def test_repeated_kills_lose_nothing(tmp_path: Path, store: str) -> None:
    """One worker at a time, SIGKILLed 0.1-0.6 s after it started running jobs,
    for a few seconds while a producer enqueues; then a rescuer drains."""
    rng = random.Random(f"kills-{store}")
    async with Cluster(tmp_path, store) as cluster:
        app = await cluster.app()
        acked = cluster.dir / "acked.txt"
        cluster.spawn(
            "producer", producer_argv(acked, job_count(), seed=1, seconds=0.05, attempts=ATTEMPTS)
        )
        log = KillLog()
        deadline = time.monotonic() + kill_seconds()
        while time.monotonic() < deadline or log.kills < 2:
            worker = cluster.start_worker(20, env=KILL_LEASE, name="doomed")
            await wait_recording(cluster, worker.pid)
            await asyncio.sleep(rng.uniform(0.1, 0.6))
            await log.kill(cluster, app, worker.pid)
            assert worker.popen.wait(10) == -signal.SIGKILL
        cluster.start_worker(50, env=RESCUER, name="rescuer")
        await wait_producer(cluster)
        await check_and_report(cluster, app, acked, log, "worker SIGKILL, repeated")


@pytest.mark.timeout(kill_seconds() * 4 + 150)
@pytest.mark.parametrize("store", CHAOS_STORES)
async def test_repeated_kills_under_processes(tmp_path: Path, store: str) -> None:
    """``conveyor worker --processes 3``: a random child SIGKILLed every
    0.3-1 s; the supervisor restarts it; the siblings recover its jobs."""
    rng = random.Random(f"processes-{store}")
    async with Cluster(tmp_path, store) as cluster:
        app = await cluster.app()
        acked = cluster.dir / "acked.txt"
        cluster.spawn(
            "producer", producer_argv(acked, job_count(), seed=2, seconds=0.05, attempts=ATTEMPTS)
        )
        supervisor = cluster.start_worker(10, env=KILL_LEASE, extra=["--processes", "3"])
        log = KillLog()
        deadline = time.monotonic() + kill_seconds()
        while time.monotonic() < deadline or log.kills < 2:
            assert supervisor.alive, f"the supervisor died\n{supervisor.tail(40)}"
            children = await cluster.wait_until(
                lambda: recording_children(cluster, supervisor), 30, "no child is running jobs"
            )
            await log.kill(cluster, app, rng.choice(children))
            await asyncio.sleep(rng.uniform(0.3, 1.0))
        await wait_producer(cluster)
        await check_and_report(cluster, app, acked, log, "worker SIGKILL, --processes 3")
        assert supervisor.alive, supervisor.tail(40)
        supervisor.signal(signal.SIGTERM)
        assert await supervisor.wait_exit(30, "after SIGTERM") == 0, supervisor.tail(40)


def recording_children(cluster: Cluster, supervisor: Proc) -> list[int]:
    """The supervisor's live children that have started running jobs."""
    return [
        pid
        for pid in descendants(supervisor.pid)
        if (cluster.runs_dir / f"runs-{pid}.sqlite").exists() and not is_zombie(pid)
    ]


async def wait_producer(cluster: Cluster) -> None:
    (producer,) = [p for p in cluster.procs if p.name.startswith("producer")]
    rc = await producer.wait_exit(max(120.0, kill_seconds() * 2), "(the producer)")
    assert rc == 0, producer.tail()

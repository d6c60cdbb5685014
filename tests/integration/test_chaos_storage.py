"""Chaos: the store's storage stops taking writes while a worker process runs.

- SQLite on a small tmpfs filled up to the last byte, then freed;
- SQLite on a tmpfs remounted read-only (between runs: Linux refuses to
  remount a filesystem read-only while SQLite holds its files open for
  writing), then read-write again;
- a PostgreSQL database switched to ``default_transaction_read_only``, then back.

Each time: the enqueues that fail raise :class:`BackendUnavailable` and store
nothing, every enqueue that returned a job is there (G1), and once the fault
clears the same worker drains everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from chaos_helpers import Cluster, Proc, get_jobs, report
from postgres_databases import own_database

from conveyor.app import Conveyor
from conveyor.errors import BackendUnavailable
from conveyor.job import JobState
from support.services import missing_service

pytestmark = pytest.mark.slow

#: A payload that fills a small disk in a few hundred enqueues.
PAD = "x" * 2000
#: Refused enqueues to see before the fault is cleared...
REFUSALS = 10
#: ... and for at least this long, so the worker meets the fault too.
FAULT_SECONDS = 2.0


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (needs root), unmounted afterwards."""
    if os.geteuid() != 0:
        missing_service("mounting a tmpfs needs root")
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        missing_service(f"cannot mount a tmpfs at {path}: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def remount(path: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True, capture_output=True)


def fill(directory: Path, leave: int) -> Path:
    """A file taking all of ``directory``'s free space but ``leave`` bytes."""
    stat = os.statvfs(directory)
    filler = directory / "filler"
    filler.write_bytes(b"\0" * max(0, stat.f_bavail * stat.f_frsize - leave))
    return filler


class Producer:
    """Enqueues from the test process: single jobs and batches of five,
    counting what was acknowledged and what was refused (and how)."""

    def __init__(self, app: Conveyor) -> None:
        self.app = app
        self.acked: list[str] = []
        self.refused = 0
        self.other_errors: list[str] = []
        self.sent = 0

    async def once(self) -> bool:
        """One enqueue (every tenth a batch of five); True when acknowledged."""
        n = self.sent
        self.sent += 1
        payload = {"seconds": 0.0, "pad": PAD, "n": n}
        try:
            if n % 10 == 9:
                jobs = await self.app.enqueue_many([("chaos.sleep", payload, None)] * 5)
            else:
                jobs = [await self.app.enqueue("chaos.sleep", payload)]
        except BackendUnavailable:
            self.refused += 1
            return False
        except Exception as exc:  # any other error is a finding
            self.other_errors.append(f"{type(exc).__name__}: {exc}")
            return False
        self.acked += [job.id for job in jobs]
        return True

    async def until_refused(self, refusals: int, seconds: float, limit: int = 20_000) -> None:
        """Enqueue until ``refusals`` more were refused and ``seconds`` passed."""
        target = self.refused + refusals
        deadline = time.monotonic() + seconds
        for _ in range(limit):
            if not await self.once():
                await asyncio.sleep(0.05)
            assert not self.other_errors, f"an enqueue failed untyped: {self.other_errors[:3]}"
            if self.refused >= target and time.monotonic() >= deadline:
                return
        raise AssertionError(f"{limit} enqueues and only {self.refused} refused: no fault")

    async def acknowledged(self, count: int) -> None:
        """``count`` acknowledged enqueues in a row: the fault has cleared."""
        for _ in range(count):
            assert await self.once(), f"an enqueue failed after the fault cleared: {self.refused}"


async def drain_and_report(
    cluster: Cluster, app: Conveyor, producer: Producer, worker: Proc, fault: str
) -> None:
    """The worker drains every acknowledged job; the store holds nothing else."""
    total = len(producer.acked)

    async def drained() -> bool:
        return await app.count_jobs(JobState.COMPLETED) >= total

    await cluster.wait_until(drained, 120, f"the worker did not drain {total} jobs", interval=0.2)
    stored = await get_jobs(app, producer.acked)
    lost = [job_id for job_id in producer.acked if job_id not in stored]
    unfinished = [job.id for job in stored.values() if job.state is not JobState.COMPLETED]
    extra = await app.count_jobs() - total
    counts = cluster.run_counts()
    duplicated = sum(1 for job_id in producer.acked if counts[job_id] > 1)
    passed = not (lost or unfinished or extra or duplicated) and producer.refused > 0
    report(
        fault,
        cluster.store,
        jobs=total,
        faults=producer.refused,
        lost=len(lost) + len(unfinished),
        duplicated=duplicated,
        bound=0,
        passed=passed,
        note=f"{producer.refused} enqueues refused, BackendUnavailable",
    )
    assert producer.refused > 0, "no enqueue was refused: the fault never bit"
    assert not lost, f"{len(lost)} acknowledged enqueue(s) are not in the store (G1)"
    assert not unfinished, f"{len(unfinished)} acknowledged job(s) never completed"
    assert extra == 0, f"{extra} job(s) stored by enqueues that raised"
    assert duplicated == 0, f"{duplicated} job(s) ran twice, with no worker lost"
    assert worker.alive, f"the worker died during the fault\n{worker.tail(40)}"


@pytest.mark.timeout(180)
async def test_sqlite_full_disk(tmp_path: Path) -> None:
    """A 4 MB tmpfs filled up while a worker runs: enqueues raise
    BackendUnavailable (nothing stored), the worker survives its own failed
    writes, and once space is freed everything completes."""
    with tmpfs(tmp_path / "disk", "4m") as disk:
        async with Cluster(tmp_path) as cluster:
            cluster.db_path = disk / "conveyor.db"
            cluster.url = f"sqlite:///{cluster.db_path}"
            app = await cluster.app()
            producer = Producer(app)
            await producer.acknowledged(20)
            worker = cluster.start_worker(4)
            await cluster.wait_until(
                lambda: len(cluster.run_counts()) > 0, 60, "the worker never ran a job"
            )
            filler = fill(disk, leave=400_000)
            await producer.until_refused(REFUSALS, seconds=FAULT_SECONDS)
            filler.unlink()
            await producer.acknowledged(20)
            await drain_and_report(cluster, app, producer, worker, "disk full (tmpfs)")
            assert "SQLITE_FULL" in worker.err(), "the worker never met the full disk"


@pytest.mark.timeout(180)
async def test_sqlite_read_only_mount(tmp_path: Path) -> None:
    """The tmpfs remounted read-only while nothing runs: opening the store
    and enqueueing raise BackendUnavailable, nothing is written; remounted
    read-write, a worker drains what was acknowledged before and after."""
    with tmpfs(tmp_path / "disk", "8m") as disk:
        async with Cluster(tmp_path) as cluster:
            cluster.db_path = disk / "conveyor.db"
            cluster.url = f"sqlite:///{cluster.db_path}"
            app = await cluster.app()
            producer = Producer(app)
            await producer.acknowledged(30)
            await app.close()

            remount(disk, "ro")
            readonly = Conveyor(cluster.url)
            try:
                for _ in range(REFUSALS):
                    try:
                        await readonly.enqueue("chaos.sleep", {"pad": PAD})
                    except BackendUnavailable:
                        producer.refused += 1
            finally:
                await readonly.close()
            remount(disk, "rw")
            assert producer.refused == REFUSALS, "an enqueue on the read-only mount returned"

            app = await reopen(cluster)
            producer.app = app
            worker = cluster.start_worker(4)
            await producer.acknowledged(30)
            await drain_and_report(cluster, app, producer, worker, "read-only mount (tmpfs)")


async def reopen(cluster: Cluster) -> Conveyor:
    """The cluster's app again, after the test closed it."""
    cluster._app = None
    return await cluster.app()


# -- PostgreSQL ---------------------------------------------------------------------


@pytest.mark.timeout(180)
async def test_postgres_read_only_database(tmp_path: Path) -> None:
    """A database switched to ``default_transaction_read_only`` (its sessions
    ended, as a failover to a standby would) while a worker runs: enqueues
    raise BackendUnavailable and store nothing; switched back, the same
    worker and app carry on and everything completes."""
    async with own_database() as db, Cluster(tmp_path) as cluster:
        cluster.url, cluster.store = db.url, "postgres"
        app = await cluster.app()
        producer = Producer(app)
        await producer.acknowledged(20)
        worker = cluster.start_worker(4)
        await cluster.wait_until(
            lambda: len(cluster.run_counts()) > 0, 60, "the worker never ran a job"
        )
        await db.set_read_only(True)
        await producer.until_refused(REFUSALS, seconds=FAULT_SECONDS)
        await db.set_read_only(False, end_sessions=False)
        await cluster.wait_until(producer.once, 30, "enqueues still fail after the switch back")
        await producer.acknowledged(20)
        await drain_and_report(cluster, app, producer, worker, "database read-only")
        assert "read-only" in worker.err(), "the worker never met the read-only database"

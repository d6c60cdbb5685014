"""Chaos: workers that die or freeze mid-run (G1 no loss, G2 bounded duplicates,
G4 fencing, G5 poison bound), with real worker processes on one SQLite file."""

from __future__ import annotations

import asyncio
import random
import signal
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest
from chaos_apps.recorder import Run
from chaos_helpers import SHORT_LEASE, Cluster, Proc, descendants, get_jobs

from conveyor.job import FailureReason, JobState

pytestmark = pytest.mark.slow


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path) as chaos:
        yield chaos


@pytest.mark.timeout(150)
async def test_sigkill_with_jobs_in_flight_loses_nothing(cluster: Cluster) -> None:
    """3,000 jobs, a worker at -c 200 SIGKILLed once 1,000 are active or done,
    then a new worker: every job completes, and only jobs the dead worker held
    ran twice (G1, G2)."""
    total = 3000
    app = await cluster.app()
    rng = random.Random(7)
    ids: list[str] = []
    for _ in range(total // 500):
        jobs = await app.enqueue_many(
            [("chaos.sleep", {"seconds": rng.uniform(0.02, 0.05)}) for _ in range(500)]
        )
        ids += [job.id for job in jobs]
    assert len(set(ids)) == total

    # Its jobs are recovered once its lease runs out; the rescuer's can be long.
    first = cluster.start_worker(200, env=SHORT_LEASE, name="doomed")

    async def progressed() -> bool:
        counts = (await app.stats()).get("default", {})
        return counts.get("active", 0) + counts.get("completed", 0) >= 1000

    await cluster.wait_until(progressed, 60, "the first worker never had 1,000 jobs active/done")
    first.signal(signal.SIGKILL, group=True)
    assert await first.wait_exit(10, "after SIGKILL") == -signal.SIGKILL

    # Nobody moves a job until a live worker's stall reaper runs: what is active
    # now is exactly what the dead worker held (claimed, not settled).
    in_flight = {job.id for job in await app.list_jobs(JobState.ACTIVE, limit=total)}
    done_before = await app.count_jobs(JobState.COMPLETED)
    unfinished_runs = {r.job_id for r in cluster.runs() if r.ended is None}
    assert in_flight, "SIGKILL landed when no job was in flight: the test proved nothing"
    assert unfinished_runs <= in_flight, (
        f"{len(unfinished_runs - in_flight)} job(s) were mid-run in the dead worker but not "
        "active in the database"
    )

    started = time.monotonic()
    cluster.start_worker(200, name="rescuer")

    async def all_completed() -> bool:
        return await app.count_jobs(JobState.COMPLETED) == total

    await cluster.wait_until(
        all_completed,
        90,
        lambda: f"not every job completed: {cluster_counts_text(cluster)}",
        interval=0.2,
    )
    recovery = time.monotonic() - started

    assert await app.count_jobs() == total, "jobs appeared or vanished"
    counts = cluster.run_counts()
    never_ran = [job_id for job_id in ids if counts[job_id] == 0]
    assert not never_ran, f"{len(never_ran)} completed job(s) have no recorded run"
    duplicates = {job_id for job_id, n in counts.items() if n > 1}
    assert len(duplicates) <= len(in_flight), (
        f"{len(duplicates)} duplicate runs for {len(in_flight)} jobs in flight (G2)"
    )
    assert duplicates <= in_flight, (
        f"{len(duplicates - in_flight)} job(s) ran twice that the dead worker did not hold"
    )
    assert max(counts.values()) <= 2, "a job ran three times after a single fault"
    stored = await get_jobs(app, ids)
    recovered = {job_id for job_id, job in stored.items() if (job.attempts, job.stalls) == (2, 1)}
    untouched = {job_id for job_id, job in stored.items() if (job.attempts, job.stalls) == (1, 0)}
    assert recovered == in_flight, "the dead worker's jobs were not each recovered exactly once"
    assert len(untouched) == total - len(in_flight), "attempts/stalls off for unfaulted jobs"
    print(
        f"\nSIGKILL: {len(in_flight)} in flight, {done_before} done before the kill, "
        f"{len(duplicates)} duplicates, rest drained in {recovery:.1f}s"
    )


def cluster_counts_text(cluster: Cluster) -> str:
    counts = cluster.run_counts()
    return f"{len(counts)} distinct jobs ran, {sum(counts.values())} runs\n{cluster.tails()}"


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("how", "supervised"),
    [("exit", False), ("sigkill", True), ("sys-exit-2", True)],
    ids=["os_exit-local-loop", "sigkill-cli-processes", "sys_exit_2-cli-processes"],
)
async def test_poison_job_runs_at_most_attempts_times(
    cluster: Cluster, how: str, supervised: bool
) -> None:
    """A job that kills its worker, attempts=3, with workers restarted as they
    die (a test-local loop, or ``--processes 2``): it runs at most 3 times, then
    fails ``stalled`` (G5), and a healthy job behind it still completes."""
    app = await cluster.app()
    poison = await app.enqueue("chaos.poison", {"how": how}, attempts=3, priority=10)
    healthy = await app.enqueue("chaos.sleep", {"seconds": 0})

    dead: list[Proc] = []
    live: Proc | None = None
    # Short: each death leaves the poison job to stall recovery.
    supervisor = (
        cluster.start_worker(1, env=SHORT_LEASE, extra=["--processes", "2"]) if supervised else None
    )
    deadline = time.monotonic() + 60
    while True:
        job = await app.get_job(poison.id)
        assert job is not None
        if job.is_terminal:
            break
        if supervisor is not None:
            assert supervisor.alive, (
                f"the supervisor exited {supervisor.popen.returncode} while a poison job "
                f"was still {job.state} (runs so far: {cluster.run_counts()[poison.id]}): "
                f"one bad job took every worker down\n{supervisor.tail(40)}"
            )
        else:
            if live is not None and not live.alive:
                dead.append(live)
                live = None
            assert len(dead) <= 5, f"the poison job killed {len(dead)} workers\n{cluster.tails()}"
            if live is None:
                live = cluster.start_worker(1, env=SHORT_LEASE)
        assert time.monotonic() < deadline, (
            f"poison job still {job.state} (attempts {job.attempts}, stalls {job.stalls}) "
            f"after 60s\n{cluster.tails()}"
        )
        await asyncio.sleep(0.05)

    assert job.state is JobState.FAILED, f"poison job ended {job.state}"
    runs = [r for r in cluster.runs() if r.job_id == poison.id]
    assert len(runs) <= 3, f"the poison job ran {len(runs)} times with attempts=3 (G5)"
    assert len(runs) == job.attempts == 3, (
        f"{len(runs)} runs recorded, attempts {job.attempts}: attempts must count every claim"
    )
    if how == "sys-exit-2":
        # SystemExit raised by a handler may fairly be caught as the job's error.
        assert job.failure_reason in (FailureReason.STALLED, FailureReason.ERROR)
    else:
        assert job.failure_reason is FailureReason.STALLED
        assert len({r.pid for r in runs}) == len(runs), "a worker survived the poison job"
    if supervisor is None:
        assert len(dead) == len(runs), f"{len(dead)} workers died for {len(runs)} runs"
        assert [p.popen.returncode for p in dead] == [1] * len(dead)
        if live is None or not live.alive:
            live = cluster.start_worker(1, env=SHORT_LEASE)

    done = await app.wait_for_job(healthy.id, timeout=30)
    assert done.state is JobState.COMPLETED, f"healthy job ended {done.state}: {done.error}"
    assert done.attempts == 1, "the healthy job was in flight on a dying worker"

    if supervisor is not None:
        children = descendants(supervisor.pid)
        supervisor.signal(signal.SIGTERM)
        rc = await supervisor.wait_exit(15, "after SIGTERM to the supervisor")
        assert rc == 0, f"the supervisor exited {rc} after a clean stop\n{supervisor.tail()}"
        await cluster.wait_until(
            lambda: not any(Path(f"/proc/{pid}").exists() for pid in children),
            10,
            f"worker processes {children} outlived their supervisor",
        )


@pytest.mark.timeout(60)
async def test_stall_recovery_is_bounded(cluster: Cluster) -> None:
    """G3: a SIGKILLed worker's job runs again on a live worker within
    lease + stall_interval + poll (1 + 0.5 + 0.05 s here, plus slack)."""
    app = await cluster.app()
    workers = [
        cluster.start_worker(1, env=SHORT_LEASE, name="worker-a"),
        cluster.start_worker(1, env=SHORT_LEASE, name="worker-b"),
    ]
    job = await app.enqueue("chaos.fenced", {"first": 30.0, "later": 0.0})

    def first_run() -> Run | None:
        return next((r for r in cluster.runs() if r.job_id == job.id), None)

    run = await cluster.wait_until(first_run, 30, "no worker started the job")
    (victim,) = [w for w in workers if w.pid == run.pid]
    await asyncio.sleep(0.5)  # mid-lease
    killed_at = time.time()
    victim.signal(signal.SIGKILL, group=True)

    def rerun() -> Run | None:
        return next((r for r in cluster.runs() if r.job_id == job.id and r.attempt == 2), None)

    again = await cluster.wait_until(rerun, 15, "the killed worker's job never ran again")
    took = again.started - killed_at
    bound = 1.0 + 0.5 + 0.05
    print(f"\nstall recovery: {took:.2f}s after SIGKILL (bound {bound:.2f}s)")
    assert took <= bound + 0.75, f"stall recovery took {took:.2f}s, bound {bound:.2f}s (G3)"
    done = await app.wait_for_job(job.id, timeout=15)
    assert done.state is JobState.COMPLETED
    assert done.attempts == 2
    assert done.stalls == 1


@pytest.mark.timeout(60)
async def test_worker_that_cannot_renew_stops_trusting_its_lease(cluster: Cluster) -> None:
    """G4: while its renewals cannot get through (the database is write-locked
    longer than the lease), a worker must cancel its handler before the lease
    it holds runs out, i.e. before any other worker could claim the job."""
    app = await cluster.app()
    worker = cluster.start_worker(1, env=SHORT_LEASE)
    job = await app.enqueue("chaos.fenced", {"first": 20.0, "later": 0.2})

    def first_run() -> Run | None:
        return next((r for r in cluster.runs() if r.job_id == job.id), None)

    await cluster.wait_until(first_run, 30, "the worker never started the job")
    await asyncio.sleep(0.5)
    with closing(sqlite3.connect(cluster.db_path, timeout=10, isolation_level=None)) as db:
        db.execute("BEGIN IMMEDIATE")  # every write of the worker now waits
        (lease_until,) = db.execute(
            "SELECT lease_until FROM jobs WHERE id = ?", (job.id,)
        ).fetchone()
        await asyncio.sleep(lease_until - time.time() + 1.0)  # hold it past the lease
        run = first_run()
        db.execute("ROLLBACK")
    assert run is not None
    assert run.ended is not None, (
        "the worker kept running the handler after the lease it could not renew had "
        f"expired (lease_until was {lease_until - run.started:.2f}s after the start): "
        "another worker could have claimed the job meanwhile (G4)"
    )
    assert run.ended <= lease_until, (
        f"the handler was cancelled {run.ended - lease_until:.2f}s after the lease expired"
    )
    assert run.outcome == "cancelled"
    done = await app.wait_for_job(job.id, timeout=20)
    assert done.state is JobState.COMPLETED, f"{done.state}: {done.error}"
    assert worker.alive, worker.tail()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("stubborn", [False, True], ids=["cooperative", "stubborn"])
async def test_frozen_worker_is_fenced(cluster: Cluster, stubborn: bool) -> None:
    """Worker A is SIGSTOPped past its lease; B recovers and completes the job.
    When A resumes it must stop trusting the lease (cancel its handler) and any
    outcome it still reports is refused: the stored result stays B's (G4)."""
    app = await cluster.app()
    a = cluster.start_worker(1, env=SHORT_LEASE, name="worker-a")  # B's lease can be long
    job = await app.enqueue("chaos.fenced", {"first": 8.0, "later": 0.2, "stubborn": stubborn})

    def first_run() -> Run | None:
        return next((r for r in cluster.runs() if r.job_id == job.id), None)

    run_a = await cluster.wait_until(first_run, 30, "worker A never started the job")
    cluster.freeze(a)
    stopped_at = time.monotonic()
    b = cluster.start_worker(1, name="worker-b")

    async def completed() -> bool:
        current = await app.get_job(job.id)
        assert current is not None
        return current.state is JobState.COMPLETED

    await cluster.wait_until(completed, 30, "worker B never completed the stalled job")
    frozen_for = time.monotonic() - stopped_at
    final = await app.get_job(job.id)
    assert final is not None
    runs = [r for r in cluster.runs() if r.job_id == job.id]
    run_b = next(r for r in runs if r.pid != run_a.pid)
    assert final.result["pid"] == run_b.pid != run_a.pid
    assert final.attempts == 2, f"two claims, but attempts = {final.attempts}"
    assert final.stalls == 1

    a.signal(signal.SIGCONT, group=True)

    def a_finished() -> Run | None:
        ended = [r for r in cluster.runs() if r.pid == run_a.pid and r.ended is not None]
        return ended[0] if ended else None

    ended_a = await cluster.wait_until(
        a_finished, 15, "worker A's handler neither ended nor was cancelled after SIGCONT"
    )
    log_a = a.err()
    if stubborn:
        assert ended_a.outcome == "done-after-cancel", (
            f"A's handler was not cancelled when it resumed: {ended_a.outcome}"
        )
        await cluster.wait_until(
            lambda: "refused" in a.err(), 10, "worker A never reported its refused outcome"
        )
        log_a = a.err()
    else:
        assert ended_a.outcome == "cancelled", (
            f"A kept running a job whose lease it lost: {ended_a.outcome}"
        )
    assert job.id in log_a, f"A never logged the lost lease of {job.id}:\n{log_a}"
    assert "lease" in log_a, f"A never logged the lost lease:\n{log_a}"

    again = await app.get_job(job.id)
    assert again is not None
    assert again.state is JobState.COMPLETED
    assert again.result == final.result, "a stale worker overwrote the newer attempt (G4)"
    assert again.finished_at == final.finished_at
    assert a.alive, cluster.tails()
    assert b.alive, cluster.tails()
    print(f"\nfencing ({'stubborn' if stubborn else 'cooperative'}): A frozen {frozen_for:.1f}s")

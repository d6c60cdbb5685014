"""Chaos: graceful shutdown of a real worker process (G2 across graceful
shutdowns, G5 attempt given back, G10 no claim after SIGTERM, leases released
at the deadline, not left to expire)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from chaos_helpers import Cluster

from conveyor.job import Job, JobState

pytestmark = pytest.mark.slow

#: A run may start this long after the signal and still have been claimed before it.
EPSILON = 0.05


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path) as chaos:
        yield chaos


def assert_released(job: Job | None) -> None:
    """Back to waiting by a release: no attempt counted, no stall, no lease."""
    assert job is not None
    assert job.state is JobState.WAITING, f"job is {job.state}, not released to waiting"
    assert job.attempts == 0, f"the attempt was not given back: attempts={job.attempts}"
    assert job.stalls == 0, "the job went back through stall recovery, not a release"
    assert job.lease_until is None, "the lease was left behind"
    assert job.lease_token is None, "the lease token was left behind"
    assert job.worker_id is None
    assert not job.errors, f"a release recorded an error: {job.errors}"


@pytest.mark.timeout(60)
async def test_sigterm_drains_running_jobs_and_claims_nothing_more(cluster: Cluster) -> None:
    shutdown_timeout = 10.0
    app = await cluster.app()
    worker = cluster.start_worker(3, env={"CONVEYOR_SHUTDOWN_TIMEOUT": f"{shutdown_timeout}s"})
    running = [
        await app.enqueue("chaos.sleep", {"seconds": s}, priority=10) for s in (1.0, 1.5, 2.0)
    ]

    def all_started() -> bool:
        return len({r.job_id for r in cluster.runs()}) == 3

    await cluster.wait_until(all_started, 30, "the worker never started the 3 jobs")
    # Slots free up at 1.0 s and 1.5 s while the worker drains: it must not refill them.
    waiting = [await app.enqueue("chaos.sleep", {"seconds": 0.1}) for _ in range(6)]
    await asyncio.sleep(0.3)

    signalled_at = time.time()
    started = time.monotonic()
    worker.signal(signal.SIGTERM)
    rc = await worker.wait_exit(shutdown_timeout + 5, "after SIGTERM")
    took = time.monotonic() - started
    assert rc == 0, f"worker exited {rc} after SIGTERM\n{worker.tail()}"
    assert took < shutdown_timeout, f"drain took {took:.1f}s, over shutdown_timeout"

    for job in running:
        done = await app.get_job(job.id)
        assert done is not None
        assert done.state is JobState.COMPLETED, f"running job ended {done.state}: {done.error}"
        assert done.attempts == 1
    runs = cluster.runs()
    late = [r for r in runs if r.started > signalled_at + EPSILON]
    assert not late, f"{len(late)} job(s) started after SIGTERM (G10): {late}"
    assert sorted(r.job_id for r in runs) == sorted(j.id for j in running), "a job ran twice"
    assert all(r.outcome == "done" for r in runs)
    for job in waiting:
        assert_released(await app.get_job(job.id))
    assert not await app.workers(), "the worker left its heartbeat behind"
    print(f"\nSIGTERM drain: exited in {took:.2f}s")


#: Long-running handlers of each kind: (task, payload).
STUCK = {
    "async": ("chaos.sleep", {"seconds": 30}),
    "sync-cooperative": ("chaos.sync_sleep", {"seconds": 30}),
    "sync-blocking": ("chaos.sync_sleep", {"seconds": 12, "cooperative": False}),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", list(STUCK))
async def test_shutdown_timeout_releases_the_job_at_once(cluster: Cluster, kind: str) -> None:
    """SIGTERM with a job that outlives shutdown_timeout=1s: the job is released
    at the deadline (waiting, attempt given back) and the worker exits in ~1-3 s,
    whatever kind of handler it was running."""
    app = await cluster.app()
    worker = cluster.start_worker(2, env={"CONVEYOR_SHUTDOWN_TIMEOUT": "1s"})
    task, payload = STUCK[kind]
    job = await app.enqueue(task, payload)
    await cluster.wait_until(lambda: cluster.runs(), 30, "the worker never started the job")

    started = time.monotonic()
    worker.signal(signal.SIGTERM)
    with contextlib.suppress(AssertionError):
        await worker.wait_exit(3.5)
    # No worker is alive (or it is past its deadline), so no stall reaper ran:
    # only the release can have moved the job.
    released = await app.get_job(job.id)
    rc = await worker.wait_exit(20, "after SIGTERM with shutdown_timeout=1s")
    took = time.monotonic() - started
    assert_released(released)
    assert took <= 3.5, f"the worker exited {took:.2f}s after SIGTERM (shutdown_timeout 1s)"
    assert rc == 0, f"worker exited {rc}\n{worker.tail()}"
    assert took >= 0.9, f"the worker gave up after {took:.2f}s, before shutdown_timeout"
    (run,) = cluster.runs()
    if kind != "sync-blocking":
        assert run.outcome == "cancelled", f"the handler was not told to stop: {run.outcome}"
    print(f"\nshutdown timeout ({kind}): exited in {took:.2f}s")


@pytest.mark.timeout(60)
async def test_second_signal_forces_release(cluster: Cluster) -> None:
    app = await cluster.app()
    worker = cluster.start_worker(2, env={"CONVEYOR_SHUTDOWN_TIMEOUT": "30s"})
    job = await app.enqueue("chaos.sleep", {"seconds": 30})
    await cluster.wait_until(lambda: cluster.runs(), 30, "the worker never started the job")

    worker.signal(signal.SIGTERM)
    await asyncio.sleep(0.7)
    assert worker.alive, f"one SIGTERM did not wait for the running job\n{worker.tail()}"
    draining = await app.get_job(job.id)
    assert draining is not None
    assert draining.state is JobState.ACTIVE

    started = time.monotonic()
    worker.signal(signal.SIGTERM)
    rc = await worker.wait_exit(5, "after a second SIGTERM")
    took = time.monotonic() - started
    assert_released(await app.get_job(job.id))
    assert took < 2.5, f"the second signal took {took:.2f}s to force the exit"
    assert "Traceback" not in worker.err(), worker.tail(40)
    (run,) = cluster.runs()
    assert run.outcome == "cancelled"
    print(f"\nsecond signal: exited {rc} in {took:.2f}s")

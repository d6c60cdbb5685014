"""Chaos: the store restarts under load while enqueues with idempotency keys
are in flight (G1 no loss, G7 one job per key).

A private server (Redis with ``appendonly yes`` + ``appendfsync always``, or a
PostgreSQL cluster of its own) is killed and started again, twice in CI and
more often under ``CONVEYOR_CHAOS_LONG=1``, while two producer processes
enqueue the same keys in different orders and retry every failed call with
the very same keys (:mod:`chaos_apps.keyed_producer`), and a worker process
runs the jobs. An enqueue cut off by the kill may or may not have been stored:
the retry must then find it, never store a second job. At the end every key
has exactly one job, every acknowledgement of a key names that job, and every
job completed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from chaos_apps.recorder import Run
from chaos_helpers import Cluster, Proc, get_jobs, long_run, report
from postgres_servers import OwnServer
from redis_servers import RedisServer

from conveyor import FailureReason
from conveyor.job import Job, JobState

pytestmark = pytest.mark.slow

KEYED_PRODUCER = "tests.integration.chaos_apps.keyed_producer"
CONCURRENCY = 8
PREFETCH = 2
#: Long enough to ride out a restart (renewals fail meanwhile), short enough
#: that a claim whose reply the kill cut off is recovered quickly.
LEASE = 5.0
WORKER_ENV = {"CONVEYOR_LEASE": f"{LEASE:g}s", "CONVEYOR_PREFETCH": str(PREFETCH)}
#: How long the store stays down at each restart.
DOWN_SECONDS = 0.5

Restart = Callable[[], Awaitable[None]]


@contextlib.asynccontextmanager
async def private_store(store: str, directory: Path) -> AsyncIterator[tuple[str, Restart]]:
    """A server of this test's own: ``(url, restart)``; ``restart`` kills it
    (SIGKILL / ``pg_ctl stop -m immediate``) and starts it again."""
    if store == "redis":
        redis = RedisServer(directory, ["--appendonly", "yes", "--appendfsync", "always"])
        redis.start()

        async def restart_redis() -> None:
            redis.kill()
            await asyncio.sleep(DOWN_SECONDS)
            await asyncio.to_thread(redis.start)

        try:
            yield redis.url("chaos"), restart_redis
        finally:
            redis.kill()
        return
    postgres = OwnServer()
    try:
        await asyncio.to_thread(postgres.init)
        await asyncio.to_thread(postgres.start)

        async def restart_postgres() -> None:
            await asyncio.to_thread(postgres.stop_immediate)
            await asyncio.sleep(DOWN_SECONDS)
            await asyncio.to_thread(postgres.start)

        # Short timeouts: an outage shows within seconds, never as a hang.
        options = "schema=conveyor&connect_timeout=2&command_timeout=5"
        yield f"{postgres.url}?{options}", restart_postgres
    finally:
        await asyncio.to_thread(postgres.destroy)


@dataclass
class Acks:
    """What the producers logged: acknowledged ids per key, failed calls by type."""

    ids: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    lines: int = 0
    duplicates: int = 0
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @classmethod
    def read(cls, paths: list[Path]) -> Acks:
        acks = cls()
        for path in paths:
            if not path.exists():
                continue
            for line in path.read_text().splitlines():
                parts = line.split()
                if parts[:1] == ["ok"] and len(parts) == 4:
                    acks.ids[parts[1]].add(parts[2])
                    acks.lines += 1
                    acks.duplicates += parts[3] == "1"
                elif parts[:1] == ["err"] and len(parts) == 2:
                    acks.errors[parts[1]] += 1
        return acks


@pytest.mark.timeout(600 if long_run() else 240)
@pytest.mark.parametrize("store", ["postgres", "redis"])
async def test_store_restarts_with_idempotency_keys_in_flight(tmp_path: Path, store: str) -> None:
    keys = 3000 if long_run() else 400
    restarts = 6 if long_run() else 2
    async with (
        private_store(store, tmp_path / "server") as (url, restart),
        Cluster(tmp_path) as cluster,
    ):
        cluster.url, cluster.store = url, store
        await cluster.app()  # migrates before anyone else connects
        worker = cluster.start_worker(CONCURRENCY, env=WORKER_ENV)
        # A worker that cannot reach its store at start-up exits: kill only
        # once it is up.
        await cluster.wait_until(lambda: " started: " in worker.err(), 60, "the worker started")
        outs = [cluster.dir / f"producer-{seed}.txt" for seed in (1, 2)]
        producers = [
            cluster.spawn("producer", producer_argv(out, keys, seed))
            for seed, out in zip((1, 2), outs, strict=True)
        ]
        outages: list[float] = []
        #: When each restart ended (the server up again), on the runs' clock.
        back_at: list[float] = []
        for n in range(1, restarts + 1):
            target = 2 * keys * n // (restarts + 1)

            def produced(target: int = target) -> bool:
                check_producers(producers)
                return Acks.read(outs).lines >= target

            await cluster.wait_until(produced, 120, f"the producers reached {target} acks")
            started = time.monotonic()
            await restart()
            outages.append(time.monotonic() - started)
            back_at.append(time.time())
        for producer in producers:
            assert await producer.wait_exit(180, "(producing through the restarts)") == 0, (
                producer.tail()
            )
        await check_and_report(cluster, Acks.read(outs), keys, worker, outages, back_at)


def producer_argv(out: Path, keys: int, seed: int) -> list[str]:
    argv = [sys.executable, "-m", KEYED_PRODUCER, "--out", str(out)]
    return [*argv, "--count", str(keys), "--seed", str(seed)]


def check_producers(producers: list[Proc]) -> None:
    for producer in producers:
        assert producer.alive or producer.popen.returncode == 0, producer.tail()


async def check_and_report(
    cluster: Cluster,
    acks: Acks,
    keys: int,
    worker: Proc,
    outages: list[float],
    back_at: list[float],
) -> None:
    restarts = len(outages)
    app = await cluster.app()
    torn = {key: ids for key, ids in acks.ids.items() if len(ids) > 1}
    ids = [next(iter(found)) for found in acks.ids.values()]

    async def drained() -> bool:
        jobs = await get_jobs(app, ids)
        return len(jobs) == len(ids) and all(job.is_terminal for job in jobs.values())

    await cluster.wait_until(drained, 120, "the acknowledged jobs did not all end", 0.2)
    stored = await get_jobs(app, ids)
    runs = cluster.runs()
    recoveries = Recoveries.of(stored.values(), runs)
    # G5's limit, not a loss: every attempt of such a job was spent by a claim
    # a restart cut off (stored, its answer lost), so the worker never had it.
    spent = recoveries.spent_by_cut_claims
    lost = [job_id for job_id in ids if job_id not in stored]
    unfinished = [
        job_id
        for job_id, job in stored.items()
        if job.state is not JobState.COMPLETED and job_id not in spent
    ]
    total = await app.count_jobs()
    counts = Counter(run.job_id for run in runs)
    duplicated = sum(1 for job_id in ids if counts[job_id] > 1)
    reruns = Reruns.of(cluster.store, runs, recoveries, back_at)
    # Only what the worker held at a restart (running or prefetched) may run twice.
    bound = restarts * (CONCURRENCY + PREFETCH)
    failed_calls = sum(acks.errors.values())
    # A live worker keeps the leases of what it holds (outcomes not stored yet
    # included) through an outage well within the lease: then only a claim
    # whose answer a restart cut off may be recovered.
    renewable = max(outages) < LEASE / 2
    passed = (
        not (torn or lost or unfinished or reruns.unexplained)
        and not (renewable and recoveries.of_runs)
        and len(acks.ids) == keys
        and total == keys
        and duplicated <= bound
        and failed_calls > 0
        and set(acks.errors) <= {"BackendUnavailable"}
    )
    report(
        "store restart, idempotency keys in flight",
        cluster.store,
        jobs=keys,
        faults=restarts,
        lost=len(lost) + len(unfinished) + max(0, keys - len(acks.ids)),
        duplicated=duplicated,
        bound=bound,
        passed=passed,
        note=(
            f"{total} jobs for {keys} keys; {failed_calls} failed calls retried "
            f"with their keys; {acks.duplicates} answered as duplicates; "
            f"{recoveries.cut_claims} attempts recovered from claims cut off, "
            f"{len(recoveries.of_runs)} from runs; "
            f"{len(spent)} failed stalled, every attempt cut off (G5); "
            f"{reruns.describe()}; "
            f"longest outage {max(outages):.1f}s"
        ),
    )
    print(f"{cluster.store}: down {sum(outages):.1f}s in all, errors {dict(acks.errors)}")
    assert failed_calls > 0, "no producer call failed: the restarts never bit"
    assert set(acks.errors) <= {"BackendUnavailable"}, f"untyped errors: {dict(acks.errors)}"
    assert len(acks.ids) == keys, f"{keys - len(acks.ids)} key(s) never acknowledged"
    assert not torn, f"{len(torn)} key(s) acknowledged with different jobs: {list(torn)[:3]}"
    assert not lost, f"{len(lost)} acknowledged job(s) are not in the store (G1)"
    assert not unfinished, describe_unfinished(stored, unfinished, counts)
    assert not (renewable and recoveries.of_runs), (
        f"{len(recoveries.of_runs)} attempt(s) the worker ran were recovered as "
        f"stalled though no outage lasted {LEASE / 2:g}s: {recoveries.of_runs[:5]}"
    )
    assert not reruns.unexplained, (
        f"{len(reruns.unexplained)} job(s) ran again with neither a stall recovery nor "
        f"a claim a restart rolled back: {reruns.unexplained[:5]}"
    )
    assert total == keys, f"{total} jobs stored for {keys} keys (G7)"
    assert duplicated <= bound, f"{duplicated} jobs ran twice, bound {bound} (G2)"
    assert worker.alive, f"the worker died instead of reconnecting\n{worker.tail(40)}"


@dataclass
class Recoveries:
    """The stall recoveries of the test's jobs, each by the attempt it ended:
    one whose handler never ran (the worker never got the claim's answer) or
    one the worker ran (``(job id, attempt)``: it should have kept the lease)."""

    cut_claims: int = 0
    of_runs: list[tuple[str, int]] = field(default_factory=list)
    spent_by_cut_claims: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, jobs: Iterable[Job], runs: Iterable[Run]) -> Recoveries:
        ran = {(run.job_id, run.attempt) for run in runs}
        found = cls()
        for job in jobs:
            stalled = [e.attempt for e in job.errors if e.reason == FailureReason.STALLED.value]
            for attempt in stalled:
                if (job.id, attempt) in ran:
                    found.of_runs.append((job.id, attempt))
                else:
                    found.cut_claims += 1
            if (
                job.state is JobState.FAILED
                and job.failure_reason is FailureReason.STALLED
                and len(job.errors) == job.attempts
                and sorted(stalled) == list(range(1, job.attempts + 1))
                and not any(job_id == job.id for job_id, _ in ran)
            ):
                found.spent_by_cut_claims.add(job.id)
        return found


@dataclass
class Reruns:
    """Why each job that ran more than once did. ``rolled_back``: a run and a
    later one with the same attempt number, the end of a restart between their
    starts: the crash rolled the first claim back (PostgreSQL claims commit
    without waiting for the WAL flush, and a claim answered in the last
    milliseconds before the kill was not written yet), so the job was waiting
    again with its attempt uncounted and no stall recorded (G2). ``recovered``:
    an attempt the worker ran was recovered as stalled (G3). Anything else is
    ``unexplained``."""

    rolled_back: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    unexplained: list[str] = field(default_factory=list)

    @classmethod
    def of(
        cls, store: str, runs: list[Run], recoveries: Recoveries, back_at: list[float]
    ) -> Reruns:
        by_job: dict[str, list[Run]] = defaultdict(list)
        for run in runs:
            by_job[run.job_id].append(run)
        recovered = {job_id for job_id, _ in recoveries.of_runs}
        found = cls()
        for job_id, its_runs in by_job.items():
            if len(its_runs) < 2:
                continue
            if store == "postgres" and claim_rolled_back(its_runs, back_at):
                found.rolled_back.append(job_id)
            elif job_id in recovered:
                found.recovered.append(job_id)
            else:
                found.unexplained.append(job_id)
        return found

    def describe(self) -> str:
        return (
            f"ran again: {len(self.rolled_back)} whose claim a restart rolled back (G2), "
            f"{len(self.recovered)} recovered from runs, {len(self.unexplained)} unexplained"
        )


def claim_rolled_back(runs: list[Run], back_at: list[float]) -> bool:
    """Two runs (oldest first) of one attempt number, the end of a restart
    between their starts (the first may start while the server is dying)."""
    for n, first in enumerate(runs):
        for later in runs[n + 1 :]:
            if later.attempt == first.attempt and any(
                first.started < back < later.started for back in back_at
            ):
                return True
    return False


def describe_unfinished(stored: dict[str, Job], unfinished: list[str], runs: Counter[str]) -> str:
    lines = [f"{len(unfinished)} acknowledged job(s) did not complete:"]
    for job_id in unfinished[:5]:
        job = stored[job_id]
        history = [(e.type, e.attempt, e.reason) for e in job.errors]
        lines.append(
            f"  {job_id}: {job.state.value} ({job.failure_reason}), attempts "
            f"{job.attempts}, stalls {job.stalls}, runs {runs[job_id]}, errors {history}"
        )
    return "\n".join(lines)

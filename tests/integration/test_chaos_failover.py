"""Chaos: the Redis primary dies and its replica takes over (G1, and what
asynchronous replication gives up without WAIT mode).

A private primary and one replica, the replica reaching its primary through a
link that holds the replication stream back by ``LINK_DELAY`` (a replica that
lags, as one across a network does). Producers and a worker reach "the
primary" through an address that follows it (a proxy; Sentinel or a virtual
IP in production). Two producer processes enqueue jobs with idempotency keys,
several calls in flight each, retrying a failed call with the same keys, and
log every acknowledged job with the time it was acknowledged.

Mid-stream the primary's host fails: the primary is SIGKILLed and the bytes
still on the link die with it. After a pause the replica is promoted
(``REPLICAOF NO ONE``), the address moves to it, and a fresh replica follows
it (through a lagging link of its own). The long variant fails over three
times.

- Without WAIT mode an acknowledged enqueue can be lost: the test measures how
  many, and checks that each one was acknowledged within the replica's lag
  before the kill (asynchronous replication loses that window and nothing
  older).
- With ``wait_replicas=1`` every acknowledged enqueue is on the new primary:
  none lost.

Either way every job the new primary has completes, and only jobs the worker
ran around a failover may run twice (a claim or completion that had not
reached the replica is redone).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from chaos_helpers import Cluster, Proc, get_jobs, long_run, report
from redis_servers import RedisServer
from tcp_proxy import Proxy

from conveyor.job import JobState

pytestmark = pytest.mark.slow

KEYED_PRODUCER = "tests.integration.chaos_apps.keyed_producer"
#: How far the replica lags: the replication stream is held this long on its link.
LINK_DELAY = 0.02
#: How long the store has no primary (Sentinel takes seconds; the test less).
NO_PRIMARY = 0.5
#: Without WAIT, an acknowledged enqueue may be lost only if it was
#: acknowledged this close to the kill: the lag, plus the time a loaded host
#: takes to run the producer's code between the reply and its log line.
LOSS_WINDOW = LINK_DELAY + 0.5
#: Around a failover (from this long before the kill to this long after the
#: promotion) a run's claim or completion may be lost and the job run again.
RERUN_WINDOW = 1.0
CONCURRENCY = 8
WORKER_ENV = {"CONVEYOR_LEASE": "3s", "CONVEYOR_PREFETCH": "2", "CONVEYOR_MAX_STALLED": "100"}
PRODUCERS = 2
IN_FLIGHT = 8


async def replication_up(port: int, replicas: int | None = None) -> bool:
    client = aioredis.Redis(port=port)
    try:
        info = await client.info("replication")
    except OSError:
        return False
    finally:
        await client.aclose()
    if replicas is not None:
        return int(info.get("connected_slaves", 0)) >= replicas
    return info.get("master_link_status") == "up"


@dataclass
class Failover:
    """When one failover happened (host clock) and what it dropped."""

    killed: float
    promoted: float
    #: The replication stream the link still held: what the replica never got.
    dropped_bytes: int


class ReplicatedRedis:
    """A primary, one replica behind a lagging link, and the address clients use."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.nodes = 0
        self.primary = self._server([])
        self.replica: RedisServer | None = None
        self.link: Proxy | None = None
        self.front = Proxy(self.primary.port)
        self.failovers: list[Failover] = []

    def _server(self, args: list[str]) -> RedisServer:
        self.nodes += 1
        return RedisServer(
            self.directory / f"node{self.nodes}",
            ["--repl-diskless-sync-delay", "0", *args],
        )

    def url(self, **options: str) -> str:
        query = "&".join(["prefix=failover", *(f"{k}={v}" for k, v in options.items())])
        return f"redis://127.0.0.1:{self.front.port}/0?{query}"

    async def start(self) -> None:
        await self.front.start()
        await asyncio.to_thread(self.primary.start)
        await self._follow()

    async def _follow(self) -> None:
        """A fresh replica of the primary, through a link that lags."""
        self.link = await Proxy(self.primary.port, delay=LINK_DELAY).start()
        self.replica = self._server(["--replicaof", "127.0.0.1", str(self.link.port)])
        await asyncio.to_thread(self.replica.start)
        deadline = time.monotonic() + 30
        while not (
            await replication_up(self.replica.port)
            and await replication_up(self.primary.port, replicas=1)
        ):
            assert time.monotonic() < deadline, "the replica never caught up with its primary"
            await asyncio.sleep(0.05)

    async def fail_over(self) -> Failover:
        assert self.replica is not None
        assert self.link is not None
        killed = time.time()
        # Blocking on purpose: the proxies forward nothing between the kill and
        # the sever, so what the link held dies with the primary's host.
        self.primary.kill()
        dropped = self.link.sever()
        self.front.sever()
        await self.link.close()
        await asyncio.sleep(NO_PRIMARY)
        client = aioredis.Redis(port=self.replica.port)
        try:
            await client.execute_command("REPLICAOF", "NO", "ONE")
        finally:
            await client.aclose()
        self.primary, self.replica = self.replica, None
        self.front.retarget(self.primary.port)
        promoted = time.time()
        await self._follow()
        failover = Failover(killed, promoted, dropped)
        self.failovers.append(failover)
        return failover

    async def close(self) -> None:
        await self.front.close()
        if self.link is not None:
            await self.link.close()
        for server in (self.primary, self.replica):
            if server is not None:
                server.kill()


@contextlib.asynccontextmanager
async def replicated_redis(directory: Path) -> AsyncIterator[ReplicatedRedis]:
    store = ReplicatedRedis(directory)
    try:
        await store.start()
        yield store
    finally:
        await store.close()


@dataclass
class StampedAcks:
    """The producers' logs: acknowledged job id -> when, failed calls by type."""

    acked: dict[str, float] = field(default_factory=dict)
    keys: dict[str, set[str]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)

    @classmethod
    def read(cls, paths: list[Path]) -> StampedAcks:
        acks = cls()
        for path in paths:
            if not path.exists():
                continue
            for line in path.read_text().splitlines():
                parts = line.split()
                if parts[:1] == ["ok"] and len(parts) == 5:
                    acks.acked.setdefault(parts[2], float(parts[4]))
                    acks.keys.setdefault(parts[1], set()).add(parts[2])
                elif parts[:1] == ["err"] and len(parts) == 2:
                    acks.errors[parts[1]] = acks.errors.get(parts[1], 0) + 1
        return acks


def producer_argv(out: Path, keys: int, seed: int) -> list[str]:
    return [
        sys.executable, "-m", KEYED_PRODUCER, "--out", str(out), "--count", str(keys),
        "--seed", str(seed), "--tag", f"p{seed}-", "--concurrency", str(IN_FLIGHT), "--stamp",
    ]  # fmt: skip


def check_producers(producers: list[Proc]) -> None:
    for producer in producers:
        assert producer.alive or producer.popen.returncode == 0, producer.tail()


@pytest.mark.timeout(600 if long_run() else 180)
@pytest.mark.parametrize("wait", [False, True], ids=["async", "wait"])
async def test_redis_primary_failover(tmp_path: Path, wait: bool) -> None:
    keys = 4000 if long_run() else 800
    failovers = 3 if long_run() else 1
    options = {"wait_replicas": "1", "wait_timeout": "2s"} if wait else {}
    async with replicated_redis(tmp_path / "redis") as store, Cluster(tmp_path) as cluster:
        cluster.url, cluster.store = store.url(**options), "redis"
        await cluster.app()  # migrates before anyone else connects
        worker = cluster.start_worker(CONCURRENCY, env=WORKER_ENV)
        await cluster.wait_until(lambda: " started: " in worker.err(), 60, "the worker started")
        outs = [cluster.dir / f"producer-{seed}.txt" for seed in range(1, PRODUCERS + 1)]
        producers = [
            cluster.spawn("producer", producer_argv(out, keys, seed))
            for seed, out in enumerate(outs, start=1)
        ]
        total = PRODUCERS * keys
        for n in range(1, failovers + 1):
            target = total * n // (failovers + 1)

            def produced(target: int = target) -> bool:
                check_producers(producers)
                return len(StampedAcks.read(outs).acked) >= target

            await cluster.wait_until(produced, 120, f"the producers reached {target} acks")
            await store.fail_over()
        for producer in producers:
            assert await producer.wait_exit(240, "(producing through the failover)") == 0, (
                producer.tail()
            )
        acks = StampedAcks.read(outs)
        await check_and_report(cluster, acks, total, worker, store.failovers, wait)


async def check_and_report(
    cluster: Cluster,
    acks: StampedAcks,
    total: int,
    worker: Proc,
    failovers: list[Failover],
    wait: bool,
) -> None:
    app = await cluster.app()
    ids = list(acks.acked)
    present = await get_jobs(app, ids)

    async def drained() -> bool:
        jobs = await get_jobs(app, list(present))
        return all(job.state is JobState.COMPLETED for job in jobs.values())

    await cluster.wait_until(drained, 120, "the stored jobs did not all complete", 0.2)
    lost = [job_id for job_id in ids if job_id not in present]

    def near_a_kill(moment: float, before: float, after: float) -> bool:
        return any(f.killed - before <= moment <= f.promoted + after for f in failovers)

    # Without WAIT, what may be lost: acknowledged within the lag before a kill.
    at_risk = [job_id for job_id, at in acks.acked.items() if near_a_kill(at, LOSS_WINDOW, 0)]
    outside = [job_id for job_id in lost if job_id not in at_risk]
    # How long before its kill the oldest lost job was acknowledged.
    ages = [min((f.killed - acks.acked[job_id] for f in failovers), key=abs) for job_id in lost]
    oldest = f"{max(ages) * 1000:.0f} ms" if ages else "none"
    runs = cluster.runs()
    counts = cluster.run_counts()
    duplicated = {job_id for job_id in ids if counts[job_id] > 1}
    rerun_ok = {run.job_id for run in runs if near_a_kill(run.started, RERUN_WINDOW, RERUN_WINDOW)}
    errors = set(acks.errors)
    allowed_errors = {"BackendUnavailable", "NotReplicated"} if wait else {"BackendUnavailable"}
    lost_bound = 0 if wait else len(at_risk)
    passed = (
        len(acks.keys) == total
        and len(lost) <= lost_bound
        and not outside
        and duplicated <= rerun_ok
        and errors <= allowed_errors
        and worker.alive
    )
    dropped = ", ".join(f"{f.dropped_bytes:,}" for f in failovers)
    mode = "wait_replicas=1" if wait else "no WAIT"
    report(
        f"Redis primary failover, replica {LINK_DELAY * 1000:g} ms behind, {mode}",
        "redis",
        jobs=len(ids),
        faults=len(failovers),
        lost=len(lost),
        lost_bound=lost_bound,
        duplicated=len(duplicated),
        bound=len(rerun_ok),
        passed=passed,
        note=(
            f"{len(lost)} of {len(at_risk)} acked within {LOSS_WINDOW:g}s before a kill lost, "
            f"the oldest acked {oldest} before it; "
            f"{dropped} replication bytes died on the link; failed calls "
            f"{', '.join(f'{n} {kind}' for kind, n in sorted(acks.errors.items())) or 'none'}"
        ),
    )
    assert len(acks.keys) == total, f"{total - len(acks.keys)} key(s) never acknowledged"
    assert errors <= allowed_errors, f"unexpected errors: {acks.errors}"
    assert not outside, f"{len(outside)} lost job(s) were acknowledged long before a kill"
    if wait:
        assert not lost, f"{len(lost)} acknowledged job(s) lost despite WAIT mode"
    away = duplicated - rerun_ok
    assert not away, f"{len(away)} job(s) ran twice, away from any failover"
    assert worker.alive, f"the worker died instead of following the new primary\n{worker.tail(40)}"

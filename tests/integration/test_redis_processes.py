"""Real processes on the shared Redis server (each test on its own key prefix):

- an idempotency storm: producers in several processes enqueue the same keys in
  different orders; each key ends up with exactly one job (G7);
- four ``python -m conveyor worker`` processes drain 20,000 jobs: every job runs
  exactly once (G2).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from chaos_helpers import Cluster, producer_argv
from redis_servers import key_pattern

from conveyor.backends.base import JobFilter
from conveyor.job import JobState

pytestmark = pytest.mark.slow


@pytest.fixture
async def world(tmp_path: Path, redis_url: str) -> AsyncIterator[Cluster]:
    prefix = f"t{uuid.uuid4().hex}"
    (tmp_path / "world").mkdir()
    async with Cluster(tmp_path / "world") as cluster:
        cluster.url = f"{redis_url}?prefix={prefix}"
        yield cluster
    client = aioredis.Redis.from_url(redis_url)
    keys = [key async for key in client.scan_iter(key_pattern(prefix))]
    for start in range(0, len(keys), 1000):
        await client.delete(*keys[start : start + 1000])
    await client.aclose()


async def test_idempotency_storm_from_several_processes(world: Cluster, tmp_path: Path) -> None:
    keys, producers = 400, 4
    outs = [tmp_path / f"acks{i}.txt" for i in range(producers)]
    procs = [
        world.spawn("producer", producer_argv(out, keys, seed=i, keys=True))
        for i, out in enumerate(outs)
    ]
    for proc in procs:
        assert await proc.wait_exit(120, "(producer)") == 0, proc.tail()

    ids_by_key: dict[str, set[str]] = defaultdict(set)
    firsts: Counter[str] = Counter()
    for out in outs:
        lines = out.read_text().splitlines()
        assert len(lines) == keys
        for line in lines:
            key, job_id, duplicate = line.split()
            ids_by_key[key].add(job_id)
            if duplicate == "0":
                firsts[key] += 1
    assert len(ids_by_key) == keys
    assert all(len(ids) == 1 for ids in ids_by_key.values()), "a key got two jobs"
    assert all(firsts[key] == 1 for key in ids_by_key), "a key was inserted twice"
    app = await world.app()
    assert await app.backend.count_jobs(JobFilter()) == keys


async def test_four_worker_processes_drain_20000_jobs_once_each(world: Cluster) -> None:
    total = 20_000
    app = await world.app()
    for _ in range(total // 2000):
        await app.enqueue_many([("chaos.sleep", {"seconds": 0}, None)] * 2000)
    started = time.monotonic()
    workers = [world.start_worker(50) for _ in range(4)]
    backend = app.backend
    done = JobFilter(states=[JobState.COMPLETED])

    async def drained() -> bool:
        return await backend.count_jobs(done) == total

    await world.wait_until(drained, 180, "20,000 jobs completed", interval=0.2)
    took = time.monotonic() - started
    for worker in workers:
        assert worker.alive, worker.tail()
    runs = world.run_counts()
    assert len(runs) == total
    twice = [job_id for job_id, n in runs.items() if n != 1]
    assert not twice, f"{len(twice)} jobs ran more than once, e.g. {twice[:3]}"
    counts = await backend.queue_counts()
    assert counts["default"]["completed"] == total
    assert sum(counts["default"].values()) == total
    print(f"\nredis: 4 worker processes drained {total} jobs in {took:.1f}s (with start-up)")

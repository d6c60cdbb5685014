"""Real worker and producer processes on one PostgreSQL schema: four workers
drain 20,000 jobs with no job run twice, and producers racing on the same
idempotency keys make exactly one job per key."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from chaos_helpers import Cluster, producer_argv

from conveyor.backends.base import JobFilter
from conveyor.job import JobState

pytestmark = pytest.mark.slow


class PostgresCluster(Cluster):
    """The chaos harness (processes, logs, side table of runs) on a PostgreSQL schema."""

    def __init__(self, tmp_path: Path, server: str) -> None:
        super().__init__(tmp_path)
        self.schema = f"t_{uuid.uuid4().hex}"
        self.server = server
        self.url = f"{server}?schema={self.schema}"

    async def drop(self) -> None:
        conn = await asyncpg.connect(self.server)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        finally:
            await conn.close()


@pytest.fixture
async def cluster(tmp_path: Path, postgres_url: str) -> AsyncIterator[PostgresCluster]:
    pg = PostgresCluster(tmp_path, postgres_url)
    try:
        async with pg:
            yield pg
    finally:
        await pg.drop()


async def test_four_workers_drain_20000_jobs_without_duplicates(cluster: PostgresCluster) -> None:
    total = 20_000
    app = await cluster.app()
    ids: list[str] = []
    for start in range(0, total, 2000):
        jobs = await app.enqueue_many(
            [("chaos.sleep", {"n": i}) for i in range(start, start + 2000)]
        )
        ids += [job.id for job in jobs]
    assert len(set(ids)) == total

    # A long lease: a duplicate here can only come from two claims of one job,
    # not from a lease that ran out on a busy machine (the chaos tests do that).
    workers = [cluster.start_worker(50, env={"CONVEYOR_LEASE": "60s"}) for _ in range(4)]
    completed = JobFilter(states=[JobState.COMPLETED])

    async def all_done() -> bool:
        return await app.backend.count_jobs(completed) == total

    await cluster.wait_until(all_done, 150, "the 4 workers did not complete every job")
    for worker in workers:
        assert worker.alive, worker.tail()

    runs = cluster.run_counts()
    twice = [job_id for job_id, n in runs.items() if n > 1]
    assert twice == [], f"{len(twice)} jobs ran more than once"
    assert set(runs) == set(ids)
    pids = Counter(run.pid for run in cluster.runs())
    assert len(pids) >= 2, f"the work was not shared between processes: {pids}"


async def test_idempotency_storm_from_several_processes(cluster: PostgresCluster) -> None:
    keys = 300
    await cluster.app()  # migrated before the producers race
    outs = [cluster.dir / f"acks-{seed}.txt" for seed in range(4)]
    producers = [
        cluster.spawn("producer", producer_argv(out, keys, seed=seed, keys=True))
        for seed, out in enumerate(outs)
    ]
    await asyncio.gather(*(p.wait_exit(120, "(producing)") for p in producers))
    for producer in producers:
        assert producer.popen.returncode == 0, producer.tail()

    ids_by_key: dict[str, set[str]] = {}
    created: Counter[str] = Counter()
    for out in outs:
        lines = out.read_text().split("\n")
        assert len([line for line in lines if line]) == keys
        for line in filter(None, lines):
            key, job_id, duplicate = line.split()
            ids_by_key.setdefault(key, set()).add(job_id)
            if duplicate == "0":
                created[key] += 1
    assert len(ids_by_key) == keys
    assert all(len(found) == 1 for found in ids_by_key.values()), "a key named two jobs"
    assert all(created[key] == 1 for key in ids_by_key), "a key was created twice or never"
    app = await cluster.app()
    assert await app.backend.count_jobs(JobFilter()) == keys

"""Three worker hosts draining one queue (G1 no loss, G2 no duplicate), and
the throughput of each.

Each "host" is a network namespace with its own veth link to a private server
(PostgreSQL or Redis) on the root namespace; one worker process runs in each.
The test enqueues a queue of short jobs once all three are up and times the
drain, from the first run's start to the last one's end (the enqueues go on
meanwhile): per host (the jobs it ran over the whole drain) and in all. Every job
must complete exactly once, and every host must take a share of the queue.

Quick variant (CI): 8,000 jobs. Long (``CONVEYOR_CHAOS_LONG=1``): 100,000.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path

import pytest
from chaos_helpers import APP, Cluster, get_jobs, long_run, report, worker_argv
from link_stores import reachable_store
from netns import namespace

from conveyor.job import JobState

pytestmark = pytest.mark.slow

HOSTS = 3
CONCURRENCY = 8
JOBS = 100_000 if long_run() else 8_000
#: A host must run at least this share of what an even split would give it.
FAIR_SHARE = 0.25


@pytest.mark.timeout(600 if long_run() else 180)
@pytest.mark.parametrize("store", ["postgres", "redis"])
async def test_three_hosts_drain_one_queue(tmp_path: Path, store: str) -> None:
    with contextlib.ExitStack() as stack:
        spaces = [stack.enter_context(namespace()) for _ in range(HOSTS)]
        addresses = [space.host_addr for space in spaces]
        async with (
            reachable_store(store, tmp_path / "server", addresses) as (local_url, urls),
            Cluster(tmp_path) as cluster,
        ):
            cluster.url, cluster.store = local_url, store
            app = await cluster.app()  # migrates
            workers = [
                cluster.spawn(
                    f"host{n + 1}",
                    space.argv(worker_argv(APP, CONCURRENCY)),
                    env={"CONVEYOR_URL": urls[space.host_addr]},
                )
                for n, space in enumerate(spaces)
            ]
            for proc in workers:
                await cluster.wait_until(
                    lambda proc=proc: " started: " in proc.err(), 60, f"{proc.name} start"
                )
            ids: list[str] = []
            for start in range(0, JOBS, 500):
                batch = [("chaos.sleep", {"seconds": 0}, None)] * min(500, JOBS - start)
                ids += [job.id for job in await app.enqueue_many(batch)]

            async def drained() -> bool:
                return await app.count_jobs(JobState.COMPLETED) >= JOBS

            await cluster.wait_until(drained, 400, "the queue did not drain", interval=0.2)
            runs = cluster.runs()
            seconds = max(run.ended or run.started for run in runs) - runs[0].started
            stored = await get_jobs(app, ids)
            counts = Counter(run.job_id for run in runs)
            per_host = Counter(run.pid for run in runs)
            lost = [
                job_id
                for job_id in ids
                if job_id not in stored or stored[job_id].state is not JobState.COMPLETED
            ]
            duplicated = [job_id for job_id, count in counts.items() if count > 1]
            hosts = [
                {
                    "host": proc.name.split("#")[0],
                    "jobs": per_host[proc.pid],
                    "per_second": round(per_host[proc.pid] / seconds, 1),
                }
                for proc in workers
            ]
            starved = [h["host"] for h in hosts if h["jobs"] < FAIR_SHARE * JOBS / HOSTS]
            rates = ", ".join(f"{h['host']} {h['per_second']:,}/s" for h in hosts)
            report(
                f"{HOSTS} hosts (netns) draining one queue",
                store,
                jobs=len(ids),
                faults=0,
                lost=len(lost),
                duplicated=len(duplicated),
                bound=0,
                passed=not (lost or duplicated or starved),
                note=f"{JOBS / seconds:,.0f} jobs/s in all over {seconds:.1f} s: {rates}",
                hosts=[*hosts, {"host": "all", "jobs": JOBS, "per_second": round(JOBS / seconds)}],
            )
            assert not lost, f"{len(lost)} job(s) did not complete (G1)"
            assert not duplicated, f"{len(duplicated)} job(s) ran more than once (G2)"
            assert not starved, f"host(s) {starved} took almost nothing of the queue"
            for proc in workers:
                assert proc.alive, proc.tail(40)

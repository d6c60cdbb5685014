"""``/metrics``: parsed with prometheus_client's own parser, checked for real
values; job counts and durations of runs in separate worker processes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from conveyor import chain
from conveyor.app import Conveyor
from conveyor.backends.base import DURATION_BUCKETS, ClaimRequest, WorkerInfo
from support.kits import KITS, backend_params

from .conftest import READ, Serve, auth, make_app

HERE = Path(__file__).parent

NAMES = {
    "conveyor_jobs",
    "conveyor_jobs_active",
    "conveyor_job_duration_seconds",
    "conveyor_queue_depth",
    "conveyor_queue_wait_seconds",
    "conveyor_dead_letters",
    "conveyor_workers_alive",
    "conveyor_circuit_open",
}


async def scrape(client: httpx.AsyncClient) -> dict[str, list[Sample]]:
    response = await client.get("/metrics", headers=auth(READ))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f.samples for f in text_string_to_metric_families(response.text)}
    assert set(families) >= NAMES, set(families)
    return families


def value(samples: list[Sample], name: str, **labels: str) -> float:
    found = [s.value for s in samples if s.name == name and s.labels == labels]
    assert len(found) == 1, (name, labels, samples)
    return found[0]


async def test_metrics_from_a_worker_in_this_process(serve: Serve) -> None:
    app, client = await serve()
    await app.enqueue_many([("add", {"a": i, "b": 1}) for i in range(3)])
    await app.enqueue_many([("fail", None)] * 2)  # circuit_threshold=2: the circuit opens
    await app.enqueue("mail.send", {"to": "x"}, delay=3600)
    await app.drain()
    await app.enqueue("add", {"a": 1, "b": 1}, run_at=1.0)  # waiting since 1970
    backend = await app.connect()
    await backend.record_heartbeat(WorkerInfo("w-1", "h", 1, ["default"], 1, 0, 1.0))

    m = await scrape(client)
    jobs = m["conveyor_jobs"]
    assert value(jobs, "conveyor_jobs_total", task="add", queue="default", status="completed") == 3
    assert value(jobs, "conveyor_jobs_total", task="fail", queue="default", status="failed") == 2
    durations = m["conveyor_job_duration_seconds"]
    count = value(durations, "conveyor_job_duration_seconds_count", task="add", queue="default")
    assert count == 3
    inf = value(
        durations, "conveyor_job_duration_seconds_bucket", task="add", queue="default", le="+Inf"
    )
    assert inf == 3
    assert value(durations, "conveyor_job_duration_seconds_sum", task="add", queue="default") > 0
    depth = m["conveyor_queue_depth"]
    assert value(depth, "conveyor_queue_depth", queue="default", state="completed") == 3
    assert value(depth, "conveyor_queue_depth", queue="default", state="waiting") == 1
    assert value(depth, "conveyor_queue_depth", queue="emails", state="delayed") == 1
    wait = value(m["conveyor_queue_wait_seconds"], "conveyor_queue_wait_seconds", queue="default")
    assert wait > 1_000_000_000
    dead = m["conveyor_dead_letters"]
    assert value(dead, "conveyor_dead_letters", queue="default") == 2
    assert value(m["conveyor_workers_alive"], "conveyor_workers_alive") == 1
    assert value(m["conveyor_circuit_open"], "conveyor_circuit_open", task="fail") == 1
    assert m["conveyor_jobs_active"] == []


async def test_running_jobs_are_counted_active_by_task(
    served: tuple[Conveyor, httpx.AsyncClient],
) -> None:
    app, client = served
    job = await app.enqueue("add", {"a": 1, "b": 1})
    backend = await app.connect()
    claimed = await backend.claim_jobs(ClaimRequest("w-1", ["default"], 10, 30.0))
    assert [j.id for j in claimed.jobs] == [job.id]
    m = await scrape(client)
    active = m["conveyor_jobs_active"]
    assert value(active, "conveyor_jobs_active", task="add", queue="default") == 1


def run_burst_workers(url: str, processes: int) -> None:
    """``conveyor worker --burst`` in separate processes, until they exit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env["CONVEYOR_URL"] = url
    command = [sys.executable, "-m", "conveyor", "worker", "apps.metered:app", "--burst", "-c", "4"]
    workers = [
        subprocess.Popen(command, cwd=HERE, env=env, stderr=subprocess.PIPE)
        for _ in range(processes)
    ]
    for proc in workers:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()


@pytest.mark.slow
async def test_metrics_count_jobs_run_by_separate_worker_processes(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    producer = make_app(url)
    naps = [("nap", {"seconds": 0.01 * (i % 3)}) for i in range(30)]
    doomed = [("doomed", None, {"attempts": 2})] * 2
    await producer.enqueue_many([*naps, *doomed])
    await producer.close()

    await asyncio.to_thread(run_burst_workers, url, 2)

    _, client = await serve(url=url)
    m = await scrape(client)
    jobs = m["conveyor_jobs"]
    assert value(jobs, "conveyor_jobs_total", task="nap", queue="default", status="completed") == 30
    # attempts=2: each doomed job is retried once, then fails.
    assert value(jobs, "conveyor_jobs_total", task="doomed", queue="default", status="retried") == 2
    assert value(jobs, "conveyor_jobs_total", task="doomed", queue="default", status="failed") == 2
    durations = m["conveyor_job_duration_seconds"]
    buckets = {
        s.labels["le"]: s.value
        for s in durations
        if s.name.endswith("_bucket") and s.labels["task"] == "nap"
    }
    assert len(buckets) == len(DURATION_BUCKETS)
    assert buckets["+Inf"] == 30
    assert list(buckets.values()) == sorted(buckets.values())  # cumulative
    assert buckets["0.005"] >= 1  # the zero-second naps
    assert buckets["0.005"] < 30  # and the others took longer
    count = value(durations, "conveyor_job_duration_seconds_count", task="nap", queue="default")
    assert count == 30
    total = value(durations, "conveyor_job_duration_seconds_sum", task="nap", queue="default")
    assert 0.2 <= total < 5  # 10 x 0.01 + 10 x 0.02 = 0.3 s of naps
    assert value(m["conveyor_dead_letters"], "conveyor_dead_letters", queue="default") == 2


@pytest.mark.parametrize("backend", backend_params())
async def test_blocked_jobs_are_a_queue_depth(serve: Serve, tmp_path: Path, backend: str) -> None:
    kit = KITS[backend](tmp_path)
    try:
        app, client = await serve(kit.url())
        add = app.tasks["add"]
        await app.start(chain(add.step(a=1, b=1), add.step(a=2, b=2), add.step(a=3, b=3)))
        depth = (await scrape(client))["conveyor_queue_depth"]
        assert value(depth, "conveyor_queue_depth", queue="default", state="blocked") == 2
        assert value(depth, "conveyor_queue_depth", queue="default", state="waiting") == 1
    finally:
        await kit.cleanup()

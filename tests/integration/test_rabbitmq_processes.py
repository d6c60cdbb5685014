"""Three ``python -m conveyor worker --dispatch`` processes on PostgreSQL +
RabbitMQ drain jobs enqueued while they run: none lost, none run twice.

3,000 jobs by default; CONVEYOR_TEST_DRAIN_JOBS=20000 runs the full-size drain."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest
from chaos_helpers import Cluster
from rabbitmq_fixtures import Place, amqp_url, place

from conveyor.backends.base import JobFilter
from conveyor.job import JobState

__all__ = ["amqp_url", "place"]  # fixtures

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TOTAL = int(os.environ.get("CONVEYOR_TEST_DRAIN_JOBS", "3000"))
CHUNK = 500


@pytest.fixture
async def world(tmp_path: Path, place: Place) -> AsyncIterator[Cluster]:
    (tmp_path / "world").mkdir()
    async with Cluster(tmp_path / "world") as cluster:
        cluster.url = place.url
        yield cluster


async def consumers_on(where: Place, queue: str) -> int:
    connection = await aio_pika.connect(where.amqp_url)
    async with connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(where.broker_queue(queue), passive=True)
        return declared.declaration_result.consumer_count or 0


async def ready_on(where: Place, queue: str) -> int:
    return await where.message_count(queue)


async def test_three_worker_processes_drain_jobs_none_lost_none_run_twice(
    world: Cluster, place: Place
) -> None:
    # A long poll: deliveries (and the store's NOTIFY) do the waking.
    env = {"CONVEYOR_DISPATCH": place.dispatch(), "CONVEYOR_POLL_INTERVAL": "30s"}
    workers = [world.start_worker(50, env=env, extra=["--quiet"]) for _ in range(3)]
    app = await world.app()
    place.queues.add("default")

    async def consuming() -> bool:
        try:
            return await consumers_on(place, "default") == 3
        except aio_pika.exceptions.ChannelNotFoundEntity:
            return False  # not declared yet

    await world.wait_until(consuming, 60, "3 consumers on the broker queue")
    for info, _ in await app.workers():
        place.queues.add(f"worker.{info.id}")  # removed after the test
    started = time.monotonic()
    for _ in range(TOTAL // CHUNK):
        await app.enqueue_many([("chaos.sleep", {"seconds": 0}, None)] * CHUNK)
    backend = app.backend
    done = JobFilter(states=[JobState.COMPLETED])

    async def drained() -> bool:
        return await backend.count_jobs(done) == TOTAL

    await world.wait_until(drained, 500, f"{TOTAL} jobs completed", interval=0.2)
    took = time.monotonic() - started
    # Every message consumed and acknowledged while the workers run.
    await world.wait_until(lambda: _no_ready(place), 15, "broker queue drained", interval=0.2)
    for worker in workers:
        assert worker.alive, worker.tail()
    runs = world.run_counts()
    assert len(runs) == TOTAL
    twice = [job_id for job_id, n in runs.items() if n != 1]
    assert not twice, f"{len(twice)} jobs ran more than once, e.g. {twice[:3]}"
    counts = await backend.queue_counts()
    assert counts["default"]["completed"] == TOTAL
    assert sum(counts["default"].values()) == TOTAL
    print(f"\npostgres+rabbitmq: 3 worker processes drained {TOTAL} jobs in {took:.1f}s")


async def _no_ready(where: Place) -> bool:
    return await ready_on(where, "default") == 0

"""RabbitMQ dispatch under hard broker faults, on a PRIVATE node this module
starts (support/rabbit_node.py), never the shared broker other tests use:

- the node's Erlang VM killed with SIGKILL (no shutdown, nothing flushed)
  under two producers and two workers, then started again on its data;
- a memory alarm and a disk alarm: the broker blocks publishing connections;
  enqueue goes on (the store keeps every job), the relay waits, the dispatch
  lag grows, and once the alarm is cleared every job is published and run.

In each, every acknowledged enqueue completes exactly once. The workers' own
store wait is turned off (as in test_rabbitmq_faults.py): deliveries are their
only wake-up, so a lost message shows as a job that never completes."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import asyncpg
import pytest
from rabbitmq_fixtures import Place
from test_rabbitmq_faults import all_completed, broker_only_worker, produce, worker_app

from conveyor.job import Job
from support import rabbit_node
from support.rabbit_node import RabbitNode
from support.services import missing_service

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.fixture
async def node() -> AsyncIterator[RabbitNode]:
    why = rabbit_node.available()
    if why is not None:
        missing_service(f"these tests start a private RabbitMQ node: {why}")
    started = RabbitNode()
    try:
        await started.start()
        yield started
    finally:
        await started.stop()


@pytest.fixture
async def private_place(postgres_url: str, node: RabbitNode) -> AsyncIterator[Place]:
    """The test's schema, on the private node (thrown away with it)."""
    tag = uuid.uuid4().hex[:12]
    where = Place(postgres_url, f"t_{tag}", node.url, f"t{tag}.")
    try:
        yield where
    finally:
        conn = await asyncpg.connect(postgres_url)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{where.schema}" CASCADE')
        finally:
            await conn.close()


async def test_a_broker_killed_with_sigkill_under_two_producers_and_two_workers_loses_nothing(
    private_place: Place, node: RabbitNode
) -> None:
    ran: Counter[str] = Counter()
    apps = [worker_app(private_place, ran) for _ in range(4)]
    producers, workers = apps[:2], apps[2:]
    acknowledged: list[Job] = []
    try:
        async with (
            broker_only_worker(workers[0], worker_id="k1", concurrency=10),
            broker_only_worker(workers[1], worker_id="k2", concurrency=10),
        ):
            producing = [asyncio.create_task(produce(p, 400, acknowledged)) for p in producers]
            await asyncio.sleep(0.8)
            before = len(acknowledged)
            await node.kill()
            killed_at = len(acknowledged)
            await asyncio.sleep(1.0)
            await node.start()  # on the data it had: the quorum queues recover
            during = len(acknowledged) - killed_at
            await asyncio.gather(*producing)
            # The reconnection takes seconds; then the relays publish the rest.
            await all_completed(producers[0], acknowledged, timeout=120)
        assert before > 0
        assert during > 0, "producers kept enqueueing while the broker was dead"
        assert len(acknowledged) == 800
        assert len(ran) == 800
        twice = [job_id for job_id, n in ran.items() if n != 1]
        assert not twice, f"{len(twice)} jobs ran more than once, e.g. {twice[:3]}"
    finally:
        for app in apps:
            await app.close()


ALARMS = {
    # Any memory use is past a watermark this low; 0.4 is the default.
    "memory": (
        ("set_vm_memory_high_watermark", "0.0000001"),
        ("set_vm_memory_high_watermark", "0.4"),
    ),
    # No disk has this much free; 50 MB is the default.
    "disk": (("set_disk_free_limit", "1000000GB"), ("set_disk_free_limit", "50MB")),
}


@pytest.mark.parametrize("alarm", sorted(ALARMS))
async def test_a_broker_alarm_blocks_publishing_then_every_job_runs_once(
    private_place: Place, node: RabbitNode, alarm: str
) -> None:
    raise_alarm, clear_alarm = ALARMS[alarm]
    ran: Counter[str] = Counter()
    apps = [worker_app(private_place, ran) for _ in range(3)]
    producer, workers = apps[0], apps[1:]
    acknowledged: list[Job] = []
    try:
        async with (
            broker_only_worker(workers[0], worker_id="a1", concurrency=10),
            broker_only_worker(workers[1], worker_id="a2", concurrency=10),
        ):
            await produce(producer, 50, acknowledged)
            await all_completed(producer, acknowledged, timeout=60)
            store = producer.backend.dispatch_store()  # type: ignore[attr-defined]

            await node.ctl(*raise_alarm)
            blocked = len(acknowledged)
            await produce(producer, 100, acknowledged)  # enqueue never waits on the broker
            # Nothing new is published: the oldest unpublished job's wait grows.
            deadline = time.monotonic() + 60
            while (lag := await store.lag()) < 2.0:
                assert time.monotonic() < deadline, f"dispatch lag stayed at {lag:.2f}s"
                await asyncio.sleep(0.2)
            late = acknowledged[blocked:]
            assert not any(ran[job.id] for job in late), "a job ran while publishing was blocked"

            await node.ctl(*clear_alarm)
            await all_completed(producer, acknowledged, timeout=120)
            assert await store.lag() == 0.0
        assert len(ran) == 150
        twice = [job_id for job_id, n in ran.items() if n != 1]
        assert not twice, f"{len(twice)} jobs ran more than once, e.g. {twice[:3]}"
    finally:
        for app in apps:
            await app.close()

"""RabbitMQ dispatch under broker faults, against the real broker: a restart
under two producers and two workers, every connection closed by the broker, a
queue deleted under its consumer. These tests stop the shared broker, so they
are short; the ``broker`` fixture starts it again even when a test fails.

The workers' own store wait (LISTEN/NOTIFY, the poll) is turned off here: the
broker's deliveries are their only wake-up, so a lost message or a consumer
that never came back shows up as a job that never completes (the reconciler's
bound, 60 s, is longer than these tests)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aio_pika
import pytest
from rabbitmq_fixtures import Broker, Place, amqp_url, broker, place
from worker_fixtures import running

from conveyor import Conveyor
from conveyor.dispatch import Dispatcher
from conveyor.dispatch.consumer import WorkerConsumer
from conveyor.job import Job, JobState
from conveyor.worker.worker import Worker

__all__ = ["amqp_url", "broker", "place"]  # fixtures

pytestmark = pytest.mark.timeout(120)


def worker_app(where: Place, ran: Counter[str], **settings: Any) -> Conveyor:
    app = Conveyor(where.url, dispatch=where.dispatch(), poll_interval=60.0, **settings)

    @app.task("work")
    async def work(ctx: Any, n: int = 0) -> int:
        await asyncio.sleep(0.005)  # some jobs are always in flight
        ran[ctx.job.id] += 1
        return n

    return app


async def _sleep(queues: Sequence[str], timeout: float) -> None:
    await asyncio.sleep(timeout)


@contextlib.asynccontextmanager
async def broker_only_worker(app: Conveyor, **options: Any) -> AsyncIterator[Worker]:
    """A worker woken by the broker's deliveries alone (no LISTEN/NOTIFY)."""
    backend = await app.runtime.connect()
    backend.wait_for_work = _sleep  # type: ignore[method-assign]
    async with running(app, **options) as worker:
        await wait_until(lambda: worker.wait_for_work is not None, 10, "consumer attached")
        yield worker


async def wait_until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        await asyncio.sleep(0.05)


def consumer_of(worker: Worker) -> WorkerConsumer:
    assert worker.dispatcher is not None
    assert worker.dispatcher.consumer is not None
    return worker.dispatcher.consumer


async def produce(app: Conveyor, count: int, acknowledged: list[Job]) -> None:
    """Enqueue ``count`` jobs at a steady pace; keeps what enqueue acknowledged."""
    for i in range(count):
        acknowledged.append(await app.enqueue("work", {"n": i}))
        await asyncio.sleep(0.004)


async def all_completed(app: Conveyor, jobs: Sequence[Job], timeout: float) -> None:
    for job in jobs:
        done = await app.wait_for_job(job.id, timeout=timeout)
        assert done.state is JobState.COMPLETED, (job.id, done.state)


async def queue_depth(where: Place, queue: str) -> int:
    connection = await aio_pika.connect(where.amqp_url)
    async with connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(where.broker_queue(queue), passive=True)
        return declared.declaration_result.message_count or 0


async def eventually_empty(where: Place, queue: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while (depth := await queue_depth(where, queue)) != 0:
        assert time.monotonic() < deadline, f"{depth} messages left in {queue}"
        await asyncio.sleep(0.2)


async def test_a_broker_restart_under_two_producers_and_two_workers_loses_nothing(
    place: Place, broker: Broker
) -> None:
    ran: Counter[str] = Counter()
    place.queues.update({"default", "worker.f1", "worker.f2"})
    apps = [worker_app(place, ran) for _ in range(4)]
    producers, workers = apps[:2], apps[2:]
    acknowledged: list[Job] = []
    try:
        async with (
            broker_only_worker(workers[0], worker_id="f1", concurrency=10) as w1,
            broker_only_worker(workers[1], worker_id="f2", concurrency=10) as w2,
        ):
            producing = [asyncio.create_task(produce(p, 400, acknowledged)) for p in producers]
            await asyncio.sleep(0.8)
            before = len(acknowledged)
            await broker.restart(down_for=1.0)
            during = len(acknowledged) - before
            await asyncio.gather(*producing)
            await all_completed(producers[0], acknowledged, timeout=30)
            # Busy workers claim as slots free up; idle ones only on a delivery:
            # both consumers are back and deliver new work.
            await wait_until(lambda: not (w1.active or w2.active), 10, "workers idle")
            delivered = [consumer_of(w).delivered for w in (w1, w2)]
            # A message names every job a relay took at once, so a round may
            # be a handful of messages: rounds until both got one (at most 4).
            # (A claim woken by one delivery may take jobs not yet published.)
            for _ in range(4):
                await asyncio.gather(*(produce(p, 10, acknowledged) for p in producers))
                await all_completed(producers[0], acknowledged, timeout=15)
                now = [consumer_of(w).delivered for w in (w1, w2)]
                if now[0] > delivered[0] and now[1] > delivered[1]:
                    break
            assert now[0] > delivered[0]  # the broker alternates between them
            assert now[1] > delivered[1]
            # Every message was consumed and acknowledged (while the workers run:
            # a stopping worker's unacknowledged deliveries go back to the queue).
            await eventually_empty(place, "default")
        assert len(acknowledged) >= 820
        assert during > 0, "producers kept enqueueing while the broker was down"
        assert len(ran) == len(acknowledged)
        assert set(ran.values()) == {1}, "a job ran twice"
    finally:
        for app in apps:
            await app.close()


async def test_workers_come_back_after_the_broker_closes_every_connection(
    place: Place, broker: Broker
) -> None:
    ran: Counter[str] = Counter()
    place.queues.update({"default", "worker.c1"})
    app = worker_app(place, ran)
    try:
        async with broker_only_worker(app, worker_id="c1", concurrency=10) as worker:
            first = await app.enqueue_many([("work", {"n": i}) for i in range(50)])
            await all_completed(app, first, timeout=15)
            delivered = consumer_of(worker).delivered
            await broker.close_all_connections()
            second = await app.enqueue_many([("work", {"n": i}) for i in range(50)])
            await all_completed(app, second, timeout=15)
            assert consumer_of(worker).delivered > delivered
            await eventually_empty(place, "default")
        assert len(ran) == 100
        assert set(ran.values()) == {1}
    finally:
        await app.close()


async def delete_queue(where: Place, queue: str) -> None:
    connection = await aio_pika.connect(where.amqp_url)
    async with connection:
        channel = await connection.channel()
        await channel.queue_delete(where.broker_queue(queue))


async def test_a_consumer_cancelled_by_the_broker_recovers_when_its_queue_is_deleted(
    place: Place,
) -> None:
    ran: Counter[str] = Counter()
    place.queues.update({"default", "worker.q1"})
    app = worker_app(place, ran)
    try:
        async with broker_only_worker(app, worker_id="q1", concurrency=10) as worker:
            first = await app.enqueue_many([("work", {"n": i}) for i in range(20)])
            await all_completed(app, first, timeout=15)
            delivered = consumer_of(worker).delivered
            # The broker cancels the consumer and forgets the queue; the relay
            # had it declared. Its next publishes come back unroutable.
            await delete_queue(place, "default")
            second = await app.enqueue_many([("work", {"n": i}) for i in range(20)])
            await all_completed(app, second, timeout=15)
            assert consumer_of(worker).delivered > delivered
            await eventually_empty(place, "default")  # declared again
        assert len(ran) == 40
        assert set(ran.values()) == {1}
    finally:
        await app.close()


def published(dispatcher: Dispatcher) -> int:
    return dispatcher.relay.published if dispatcher.relay is not None else 0


async def test_the_relay_declares_a_deleted_queue_again_and_loses_no_message(
    place: Place,
) -> None:
    app = worker_app(place, Counter())
    place.queues.add("default")
    try:
        backend = await app.runtime.connect()
        relay = Dispatcher(place.dispatch(), backend, worker_queue_ttl=60.0, roles=("relay",))
        await relay.start()
        try:
            await app.enqueue("work", {"n": 1})
            await wait_until(
                lambda: relay.relay is not None and relay.relay.published == 1, 10, "1"
            )
            await delete_queue(place, "default")  # and its message with it
            await app.enqueue("work", {"n": 2})
            await wait_until(
                lambda: relay.relay is not None and relay.relay.published == 2, 10, "2"
            )
            assert relay.relay is not None
            assert relay.relay.failed >= 1  # returned unroutable, then published again
            assert await queue_depth(place, "default") == 1
        finally:
            await relay.close()
        totals = await backend.dispatch_store().counts()  # type: ignore[attr-defined]
        assert totals["message", "returned"] >= 1
        assert totals.get(("message", "unconfirmed"), 0) == 0
        assert totals["message", "confirmed"] == 2
    finally:
        await app.close()

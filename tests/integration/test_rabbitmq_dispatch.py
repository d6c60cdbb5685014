"""RabbitMQ dispatch against the real broker and PostgreSQL: the seed's
worker-queue TTL through the broker's dead-letter path, enqueue while the
broker is down, a malformed dead letter, a lost publish healed by the
reconciler, and a drain with none lost and none run twice."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import aio_pika
import orjson
import pytest
from rabbitmq_fixtures import Place, amqp_url, place, sqlite_place
from worker_fixtures import running

from conveyor import Conveyor
from conveyor.dispatch import Dispatcher
from conveyor.dispatch import relay as relay_module
from conveyor.job import JobState

__all__ = ["amqp_url", "place", "sqlite_place"]  # fixtures

pytestmark = pytest.mark.timeout(60)


def make_app(where: Place, dispatch: str | None = None, **settings: Any) -> Conveyor:
    # The poll is only a backstop with dispatch: long, so deliveries do the waking.
    app = Conveyor(
        where.url,
        dispatch=dispatch or where.dispatch(),
        worker_queue_ttl=1.0,
        poll_interval=30.0,
        **settings,
    )
    ran: Counter[str] = Counter()

    @app.task("work")
    async def work(ctx: Any, n: int = 0) -> int:
        ran[ctx.job.id] += 1
        return n

    app.ran = ran  # type: ignore[attr-defined]
    return app


async def wait_until(check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


@pytest.fixture(params=["postgres", "sqlite"])
def any_place(request: pytest.FixtureRequest) -> Place:
    """The seed's scenarios run on both SQL stores."""
    where: Place = request.getfixturevalue(
        "place" if request.param == "postgres" else "sqlite_place"
    )
    return where


async def test_worker_queue_ttl_fails_job_through_the_broker_dead_letter(any_place: Place) -> None:
    place = any_place
    app = make_app(place)
    place.queues.update({"default", "worker.alive", "worker.gone"})
    letters: list[tuple[float, str]] = []  # (when, outcome) of each dead letter handled

    def dead_letter(event: str, kind: str, outcome: str, count: int, **_: Any) -> None:
        if kind == "dead_letter":
            letters.extend([(time.monotonic(), outcome)] * count)

    app.on("dispatch", dead_letter)
    try:
        async with running(app, worker_id="alive", queues=["default"]):
            sent = time.monotonic()
            lost = await app.enqueue("work", {"n": 1}, worker="gone")
            served = [await app.enqueue("work", {"n": i}, worker="alive") for i in range(5)]
            for job in served:
                done = await app.wait_for_job(job.id, timeout=5)
                assert done.state is JobState.COMPLETED
            failed = await app.wait_for_job(lost.id, timeout=1.0 + 2.0)
            took = time.monotonic() - sent
            await wait_until(lambda: _any_letter(letters), 1.0 + 2.0)
        assert failed.state is JobState.FAILED
        assert failed.failure_reason is not None
        assert failed.failure_reason.value == "expired"
        assert failed.error is not None
        assert took <= 3.0
        # The broker dead-lettered the message within TTL + 2 s, and its handler
        # either failed the job or found it already failed.
        (at, outcome), *_ = letters
        assert at - sent <= 3.0
        assert outcome in ("expired", "ignored")
        if place.store_url is None or outcome == "expired":
            assert "x-death reason 'expired'" in failed.error.message
            assert f"{place.prefix}worker.gone" in failed.error.message
        else:
            # SQLite: a claim expires due jobs of every queue, and the commit
            # watch wakes idle workers on any commit, so a claim landing between
            # the deadline and the dead letter fails the job first (same end).
            assert failed.error.message == "queue TTL expired"
    finally:
        await app.close()


async def _any_letter(letters: list[tuple[float, str]]) -> bool:
    return bool(letters)


async def test_enqueue_with_the_broker_down_is_published_once_it_is_back(place: Place) -> None:
    closed = "amqp://guest:guest@127.0.0.1:1/%2F"  # nothing listens on port 1
    app = make_app(place, dispatch=f"{closed}?prefix={place.prefix}")
    place.queues.add("default")
    try:
        jobs = [await app.enqueue("work", {"n": i}) for i in range(3)]  # does not fail
        backend = await app.runtime.connect()
        store = backend.dispatch_store()  # type: ignore[attr-defined]
        assert await store.lag() >= 0.0
        # A relay takes jobs due for 50 ms: past that, its first take holds all
        # three (on a busy host the enqueues may otherwise straddle two takes).
        await asyncio.sleep(0.1)
        # The broker "comes back": a relay on the real one publishes what waited.
        relay = Dispatcher(place.dispatch(), backend, worker_queue_ttl=1.0, roles=("relay",))
        await relay.start()
        try:
            await wait_until(lambda: _published(relay, 3), 10)
            assert await place.message_count("default") == 1  # one message names the three
        finally:
            await relay.close()
        for job in jobs:
            stored = await app.get_job(job.id)
            assert stored is not None
            assert stored.state is JobState.WAITING
    finally:
        await app.close()


async def _published(dispatcher: Dispatcher, n: int) -> bool:
    return dispatcher.relay is not None and dispatcher.relay.published >= n


async def test_a_malformed_dead_letter_is_dropped(place: Place) -> None:
    app = make_app(place)
    try:
        backend = await app.runtime.connect()
        handler = Dispatcher(
            place.dispatch(), backend, worker_queue_ttl=1.0, roles=("dead_letters",)
        )
        await handler.start()
        try:
            await wait_until(lambda: _has_handler(handler), 10)
            connection = await aio_pika.connect(place.amqp_url)
            async with connection:
                channel = await connection.channel()
                exchange = await channel.get_exchange(f"{place.prefix}dead-letter")
                await exchange.publish(aio_pika.Message(b"not json {"), routing_key="")
                await exchange.publish(aio_pika.Message(b'{"id": 5}'), routing_key="")
            await wait_until(lambda: _dropped(handler, 2), 10)
            await wait_until(lambda: _empty(place, "dead-letters"), 10)
        finally:
            await handler.close()
    finally:
        await app.close()


async def _has_handler(dispatcher: Dispatcher) -> bool:
    return dispatcher.dead_letters is not None


async def _dropped(dispatcher: Dispatcher, n: int) -> bool:
    return dispatcher.dead_letters is not None and dispatcher.dead_letters.dropped >= n


async def _empty(where: Place, name: str) -> bool:
    connection = await aio_pika.connect(where.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(f"{where.prefix}{name}", passive=True)
        return queue.declaration_result.message_count == 0


async def test_a_lost_publish_is_healed_by_the_reconciler(place: Place) -> None:
    app = make_app(place)
    place.queues.add("default")
    try:
        backend = await app.runtime.connect()
        job = await app.enqueue("work", {"n": 7})
        # A relay marked it dispatched, then its publish was lost.
        store = backend.dispatch_store()  # type: ignore[attr-defined]
        taken = await store.take(10)
        assert [item.id for item in taken] == [job.id]
        assert await store.take(10) == []  # dispatched: no relay takes it again
        dispatcher = Dispatcher(
            place.dispatch(reconcile_after="0.5s"),
            backend,
            worker_queue_ttl=1.0,
            roles=("relay", "reconciler"),
        )
        await dispatcher.start()
        try:
            await wait_until(lambda: _published(dispatcher, 1), 10)
            assert dispatcher.reconciler is not None
            assert dispatcher.reconciler.reconciled == 1
            assert await place.message_count("default") == 1
        finally:
            await dispatcher.close()
        # Closing flushed the counts to the store (conveyor serve's /metrics).
        totals = await store.counts()
        assert totals["message", "reconciled"] == 1
        assert totals["message", "confirmed"] == 1
        stored = await app.get_job(job.id)
        assert stored is not None
        assert stored.state is JobState.WAITING
    finally:
        await app.close()


async def test_a_worker_drains_jobs_none_lost_none_run_twice(any_place: Place) -> None:
    place = any_place
    app = make_app(place)
    place.queues.update({"default", "worker.d1", "worker.d2"})
    n = 1000
    try:
        async with (
            running(app, worker_id="d1", queues=["default"], concurrency=20),
            running(app, worker_id="d2", queues=["default"], concurrency=20),
        ):
            jobs = await app.enqueue_many([("work", {"n": i}) for i in range(n)])
            for job in jobs:
                done = await app.wait_for_job(job.id, timeout=30)
                assert done.state is JobState.COMPLETED
        ran: Counter[str] = app.ran  # type: ignore[attr-defined]
        assert len(ran) == n
        assert set(ran.values()) == {1}
    finally:
        await app.close()


async def test_a_poison_dispatch_message_is_dead_lettered_past_the_delivery_limit(
    place: Place,
) -> None:
    # Consumers that die holding a job's message before any claim took the job:
    # each return counts as a delivery; past delivery_limit the quorum queue
    # dead-letters it and the handler fails the still unclaimed job.
    app = make_app(place)
    place.queues.add("default")
    try:
        backend = await app.runtime.connect()
        dispatcher = Dispatcher(
            place.dispatch(delivery_limit="2"),
            backend,
            worker_queue_ttl=60.0,
            roles=("relay", "dead_letters"),
        )
        await dispatcher.start()
        try:
            poisoned = await app.enqueue("work", {"n": 1})
            await wait_until(lambda: _published(dispatcher, 1), 10)
            crashes = await crash_holding(place, "default", times=5)
            failed = await app.wait_for_job(poisoned.id, timeout=10)
        finally:
            await dispatcher.close()
        assert crashes == 3  # delivered 1 + delivery_limit times, then dead-lettered
        assert failed.state is JobState.FAILED
        assert failed.failure_reason is not None
        assert failed.failure_reason.value == "expired"
        assert failed.error is not None
        assert "x-death reason 'delivery_limit'" in failed.error.message
        assert f"{place.prefix}default" in failed.error.message
        assert await place.message_count("default") == 0
    finally:
        await app.close()


async def crash_holding(where: Place, queue: str, times: int) -> int:
    """Take the next message of ``queue`` and drop the channel unacknowledged (a
    consumer that dies holding it), up to ``times``; how many were taken."""
    taken = 0
    connection = await aio_pika.connect(where.amqp_url)
    async with connection:
        for _ in range(times):
            channel = await connection.channel()
            broker_queue = await channel.get_queue(where.broker_queue(queue), ensure=False)
            message = None
            for _ in range(20):  # a returned message is ready again within moments
                message = await broker_queue.get(fail=False)
                if message is not None:
                    break
                await asyncio.sleep(0.05)
            await channel.close()
            if message is None:
                break
            taken += 1
    return taken


async def test_an_idle_relay_wakes_on_the_stores_notify_and_when_a_job_comes_due(
    place: Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No backstop within the test: only the NOTIFY of an enqueue, or the next
    # due time the relay read, can wake it.
    monkeypatch.setattr(relay_module, "BACKSTOP", 600.0)
    app = make_app(place)
    place.queues.add("default")
    try:
        backend = await app.runtime.connect()
        relay = Dispatcher(place.dispatch(), backend, worker_queue_ttl=1.0, roles=("relay",))
        takes = 0
        take = relay.store.take

        async def counted(limit: int, min_age: float = 0.0) -> list[Any]:
            nonlocal takes
            takes += 1
            return await take(limit, min_age)

        relay.store.take = counted  # type: ignore[method-assign]
        await relay.start()
        try:
            await app.enqueue("work")
            await wait_until(lambda: _published(relay, 1), 10)
            idle_from = takes
            await asyncio.sleep(1.0)
            assert takes - idle_from <= 2, "the idle relay kept polling"
            await app.enqueue("work")  # its NOTIFY wakes the relay
            await wait_until(lambda: _published(relay, 2), 10)
            await app.enqueue("work", delay=0.5)  # due later: no NOTIFY then
            await wait_until(lambda: _published(relay, 3), 10)
        finally:
            await relay.close()
    finally:
        await app.close()


async def test_a_resumed_queue_has_its_waiting_jobs_published_again(any_place: Place) -> None:
    # A worker that got the messages while the queue was paused claimed nothing
    # and acknowledged them; on resume the relay publishes the jobs again.
    place = any_place
    app = make_app(place)
    place.queues.add("default")
    try:
        backend = await app.runtime.connect()
        await app.pause_queue("default")
        jobs = [await app.enqueue("work", {"n": i}) for i in range(3)]
        # A relay takes jobs due for 50 ms: past that, its first take holds all
        # three (on a busy host the enqueues may otherwise straddle two takes).
        await asyncio.sleep(0.1)
        relay = Dispatcher(place.dispatch(), backend, worker_queue_ttl=1.0, roles=("relay",))
        await relay.start()
        try:
            await wait_until(lambda: _published(relay, 3), 10)
            assert await place.message_count("default") == 1  # one message names the three
            connection = await aio_pika.connect(place.amqp_url)
            async with connection:  # what a worker of the paused queue did
                channel = await connection.channel()
                queue = await channel.declare_queue(place.broker_queue("default"), passive=True)
                await queue.purge()
            assert await place.message_count("default") == 0
            await app.resume_queue("default")
            await wait_until(lambda: _published(relay, 6), 10)
            assert await place.message_count("default") == 1
        finally:
            await relay.close()
        for job in jobs:
            stored = await app.get_job(job.id)
            assert stored is not None
            assert stored.state is JobState.WAITING
    finally:
        await app.close()


async def test_a_batch_dead_letter_fails_each_job_it_names_that_is_still_current(
    any_place: Place,
) -> None:
    # One message names a relay's batch; its dead letter fences each job on its
    # own: a job whose current dispatch is another stamp is left alone.
    place = any_place
    app = make_app(place)
    try:
        backend = await app.runtime.connect()
        store = backend.dispatch_store()  # type: ignore[attr-defined]
        jobs = [await app.enqueue("work", {"n": i}) for i in range(3)]
        await store.ensure_index()  # the relay's, which SQLite's take names
        stamps = {item.id: item.stamp for item in await store.take(10)}
        assert set(stamps) == {job.id for job in jobs}
        handler = Dispatcher(
            place.dispatch(), backend, worker_queue_ttl=1.0, roles=("dead_letters",)
        )
        await handler.start()
        try:
            await wait_until(lambda: _has_handler(handler), 10)
            named = [[job.id, stamps[job.id]] for job in jobs[:2]]
            named.append([jobs[2].id, stamps[jobs[2].id] - 1.0])  # an earlier dispatch
            death = {"reason": "expired", "queue": f"{place.prefix}worker.gone"}
            connection = await aio_pika.connect(place.amqp_url)
            async with connection:
                channel = await connection.channel()
                exchange = await channel.get_exchange(f"{place.prefix}dead-letter")
                body = orjson.dumps({"queue": "worker.gone", "jobs": named})
                message = aio_pika.Message(body, headers={"x-death": [death]})
                await exchange.publish(message, routing_key="")
            await wait_until(lambda: _handled(handler, 3), 10)
            assert handler.dead_letters is not None
            assert (handler.dead_letters.expired, handler.dead_letters.ignored) == (2, 1)
            await wait_until(lambda: _empty(place, "dead-letters"), 10)
        finally:
            await handler.close()
        for job in jobs[:2]:
            failed = await app.get_job(job.id)
            assert failed is not None
            assert failed.state is JobState.FAILED
            assert failed.failure_reason is not None
            assert failed.failure_reason.value == "expired"
            assert failed.error is not None
            assert "x-death reason 'expired'" in failed.error.message
        left = await app.get_job(jobs[2].id)
        assert left is not None
        assert left.state is JobState.WAITING
    finally:
        await app.close()


async def _handled(dispatcher: Dispatcher, n: int) -> bool:
    letters = dispatcher.dead_letters
    return letters is not None and letters.expired + letters.ignored >= n

"""PostgreSQL or SQLite + RabbitMQ for the shared suites: the store with the
dispatch layer running beside it, as in a worker.

RabbitMQ dispatch does not wrap a backend: the store keeps every rule and the
broker only carries wake-ups. What could break the store's rules is the layer
working on the same rows: the relay marking jobs dispatched, the reconciler
undispatching them, the dead-letter handler failing jobs ``expired``, and a
claim loop woken by broker deliveries instead of the store's NOTIFY. So the
conformance suite runs on :class:`DispatchedPostgres` (or :class:`DispatchedSQLite`), a backend
with a :class:`~conveyor.dispatch.Dispatcher` (reconciler, dead-letter
handler) on it, whose ``wait_for_work`` is a broker consumer's, and whose
relay publishes in step: after each enqueue and settle, before the call
returns. In step, because a relay marking a row holds its lock for the length
of its UPDATE, and a claim at that moment skips the row (SKIP LOCKED): a worker
claims it at the delivery that follows, but the suite's single claims right
after an enqueue would fail by chance. The worker suite runs apps built with
``dispatch=`` (the relay concurrent, as in production). Each test has its own
schema and broker name prefix; :func:`delete_broker_names` removes what it
declared.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from conveyor.backends.base import NewJob, Settlement, SettleResult
from conveyor.backends.postgres import PostgresBackend
from conveyor.backends.sqlite import SQLiteBackend
from conveyor.dispatch import Dispatcher
from conveyor.dispatch.consumer import WorkerConsumer
from conveyor.dispatch.relay import Relay
from conveyor.job import Job

if TYPE_CHECKING:
    from aio_pika.abc import AbstractRobustConnection

#: How long a test waits for the broker connection.
CONNECT_WAIT = 30.0
#: The worker-queue TTL of the dispatched backends: longer than any test, so a
#: ``worker.<id>`` message is only dead-lettered when a test asks for it.
WORKER_QUEUE_TTL = 300.0


class Dispatched:
    """A SQL store with dispatch on it (mixed in before the backend class): the
    relay in step with enqueues and settles, the reconciler and dead-letter
    handler in the background, and a broker consumer as the claim loop's wait
    (one per set of queues)."""

    def __init__(self, url: str, dispatch: str) -> None:
        super().__init__(url)
        self.dispatch = dispatch
        self.dispatcher: Dispatcher | None = None
        self.relay: Relay | None = None
        self._consumers: dict[tuple[str, ...], WorkerConsumer] = {}
        self._consuming = asyncio.Lock()
        self._relaying = asyncio.Lock()
        #: Conveyor queues this backend may have made broker queues for.
        self.broker_queues: set[str] = set()

    async def open(self) -> None:
        await super().open()
        if self.dispatcher is None:
            self.dispatcher = Dispatcher(
                self.dispatch,
                self,
                worker_queue_ttl=WORKER_QUEUE_TTL,
                roles=("reconciler", "dead_letters"),
            )
            await self.dispatcher.start()

    async def _connection(self) -> AbstractRobustConnection:
        assert self.dispatcher is not None, "used before open"
        deadline = time.monotonic() + CONNECT_WAIT
        while self.dispatcher.connection is None:
            assert time.monotonic() < deadline, "the broker did not answer"
            await asyncio.sleep(0.01)
        return self.dispatcher.connection

    async def publish_due(self) -> None:
        """Run the relay until no due job is left unpublished."""
        async with self._relaying:
            if self.relay is None:
                assert self.dispatcher is not None
                self.relay = Relay(
                    self.dispatcher.store,
                    await self._connection(),
                    self.dispatcher.options,
                    WORKER_QUEUE_TTL,
                    self.dispatcher.counts,
                    min_age=0.0,  # in step: every due job, however fresh
                )
            while await self.relay.run_once() >= self.relay.options.relay_batch:
                pass

    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        self.broker_queues.update(job.queue for job in jobs)
        stored = await super().enqueue_jobs(jobs)
        await self.publish_due()
        return stored

    async def settle_jobs(self, settlements: Sequence[Settlement]) -> SettleResult:
        result = await super().settle_jobs(settlements)
        await self.publish_due()  # released and retried jobs due again
        return result

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        assert self.dispatcher is not None, "wait_for_work before open"
        key = tuple(sorted(queues))
        self.broker_queues.update(key)
        async with self._consuming:
            consumer = self._consumers.get(key)
            if consumer is None:
                await self._connection()
                consumer = await self.dispatcher.consume(key, 50, super().wait_for_work)
                self._consumers[key] = consumer
        await consumer.wait_for_work(queues, timeout)

    async def close(self) -> None:
        for consumer in self._consumers.values():
            await consumer.close()
        self._consumers.clear()
        self.relay = None  # its channel closes with the dispatcher's connection
        if self.dispatcher is not None:
            await self.dispatcher.close()
            self.dispatcher = None
        await super().close()


class DispatchedPostgres(Dispatched, PostgresBackend):
    async def enqueue_jobs_on(self, connection: Any, jobs: Sequence[NewJob]) -> list[Job]:
        # Inside the caller's transaction: published by the next enqueue or settle.
        self.broker_queues.update(job.queue for job in jobs)
        return await super().enqueue_jobs_on(connection, jobs)


class DispatchedSQLite(Dispatched, SQLiteBackend):
    """SQLite with dispatch on it: one host, the relay's wake-up the file's
    commit watch."""


def broker_prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}."


async def delete_broker_names(amqp_url: str, prefix: str, queues: Sequence[str]) -> None:
    """Delete the broker queues of ``queues`` (conveyor names), the dead-letter
    queue and exchange under ``prefix``; absent ones are fine."""
    import aio_pika

    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        for name in [*queues, "dead-letters"]:
            await channel.queue_delete(f"{prefix}{name}")
        await channel.exchange_delete(f"{prefix}dead-letter")

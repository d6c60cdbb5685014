"""RabbitMQ dispatch: the broker carries dispatch, the SQL store keeps all the
state (docs/explanation/rabbitmq.md). Imported only when ``dispatch`` is set;
aio-pika is imported on first use, with an install hint when it is missing.

- topology.py: names and arguments of the broker's queues, declared idempotently
- relay.py: publishes due jobs that have no message yet (publisher confirms)
- consumer.py: a worker's deliveries wake its store claim, then are acknowledged
- deadletters.py: the broker's dead letters fail their jobs ``expired`` (fenced)
- reconciler.py: republishes due jobs whose message went missing
- counts.py: what the roles did, as ``dispatch`` events and the store's totals
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from conveyor.dispatch.counts import DispatchCounts
from conveyor.dispatch.topology import DispatchOptions, parse_dispatch_url
from conveyor.errors import BackendError, ConfigurationError, MissingDependency

if TYPE_CHECKING:
    from aio_pika.abc import AbstractRobustConnection

    from conveyor.backends.base import Backend
    from conveyor.backends.dispatchstore import DispatchStore
    from conveyor.dispatch.consumer import WaitForWork, WorkerConsumer
    from conveyor.dispatch.deadletters import DeadLetterHandler
    from conveyor.dispatch.reconciler import Reconciler
    from conveyor.dispatch.relay import Relay
    from conveyor.events import EventBus

__all__ = [
    "DispatchCounts",
    "DispatchOptions",
    "Dispatcher",
    "parse_dispatch_url",
    "require_client",
    "start_worker_dispatch",
    "store_of",
]

logger = logging.getLogger("conveyor.dispatch")

#: Tries to start a worker's consumer (0.1 s, doubling, between them: about 12 s).
CONSUME_ATTEMPTS = 8


def require_client() -> None:
    """aio-pika, or a MissingDependency saying how to install it."""
    try:
        importlib.import_module("aio_pika")
    except ModuleNotFoundError as exc:
        raise MissingDependency(
            f"dispatch needs {exc.name}: pip install 'conveyor[rabbitmq]'"
        ) from exc


def store_of(backend: Backend) -> DispatchStore:
    """The store side of dispatch; only the SQL stores keep it."""
    factory = getattr(backend, "dispatch_store", None)
    if factory is None:
        raise ConfigurationError(
            f"dispatch needs a SQL store (PostgreSQL or SQLite): {type(backend).__name__} cannot "
            f"keep the dispatch record in the job's transaction"
        )
    store: DispatchStore = factory()
    return store


class Dispatcher:
    """One process's dispatch roles on robust broker connections (the relay's
    own, one for the others): the relay, the reconciler, the dead-letter
    handler and, in a worker, its consumer.
    What they do is counted in ``counts`` (``dispatch`` events on ``events``),
    and flushed to the store's totals while they run and once at close.

    ``roles`` picks the background roles ("relay", "reconciler", "dead_letters").
    """

    def __init__(
        self,
        url: str,
        backend: Backend,
        *,
        worker_queue_ttl: float,
        events: EventBus | None = None,
        roles: Sequence[str] = ("relay", "reconciler", "dead_letters"),
    ) -> None:
        require_client()
        self.options = parse_dispatch_url(url)
        self.store = store_of(backend)
        self.worker_queue_ttl = worker_queue_ttl
        self.events = events
        self.roles = tuple(roles)
        self.connection: AbstractRobustConnection | None = None
        #: The relay's own: a broker alarm blocks the connections that publish,
        #: and must not hold up the consumer's acknowledgements.
        self.publisher: AbstractRobustConnection | None = None
        self.relay: Relay | None = None
        self.reconciler: Reconciler | None = None
        self.dead_letters: DeadLetterHandler | None = None
        self.consumer: WorkerConsumer | None = None
        self.counts = DispatchCounts(events)
        self._stopping = asyncio.Event()
        self._starting: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[Any]] = []

    async def start(self) -> None:
        """Connect (retrying in the background while the broker is down) and
        start the roles; returns at once."""
        self._starting = asyncio.create_task(self._start_roles(), name="dispatch start")
        self.spawn(self.counts.run(self.store), "dispatch counts")

    async def _start_roles(self) -> None:
        from conveyor.dispatch import broker
        from conveyor.dispatch.deadletters import DeadLetterHandler
        from conveyor.dispatch.reconciler import Reconciler
        from conveyor.dispatch.relay import Relay
        from conveyor.dispatch.topology import declare_dead_letters

        self.connection = await broker.connect(self.options.url, self._stopping)
        if self.connection is None or self._stopping.is_set():
            return  # close() closes a connection that came too late
        if "relay" in self.roles:
            self.publisher = await broker.connect(self.options.url, self._stopping)
            if self.publisher is None or self._stopping.is_set():
                return
            self.relay = Relay(
                self.store, self.publisher, self.options, self.worker_queue_ttl, self.counts
            )
            self.spawn(self.relay.run(), "dispatch relay")
        if "reconciler" in self.roles:
            wake = self.relay.wake if self.relay is not None else (lambda: None)
            self.reconciler = Reconciler(
                self.store, self.options.reconcile_after, wake, self.counts
            )
            self.spawn(self.reconciler.run(), "dispatch reconciler")
        if "dead_letters" in self.roles:
            handler = DeadLetterHandler(self.store, self.events, self.counts)
            channel = await self.connection.channel()
            await channel.set_qos(prefetch_count=50)
            _, queue = await declare_dead_letters(channel, self.options)
            await queue.consume(handler.handle)
            self.dead_letters = handler  # once it consumes

    def spawn(self, coro: Any, name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    async def consume(
        self, queues: Sequence[str], prefetch: int, wait_for_work: WaitForWork
    ) -> WorkerConsumer:
        """A worker's consumer on ``queues``; its ``wait_for_work`` replaces the
        store's in the claim loop. Waits for the broker connection."""
        from conveyor.dispatch.consumer import WorkerConsumer

        while self.connection is None:
            if self._stopping.is_set():
                raise ConfigurationError("dispatch stopped before the broker answered")
            await asyncio.sleep(0.05)
        for attempt in range(CONSUME_ATTEMPTS):
            consumer: WorkerConsumer | None = None
            try:
                consumer = WorkerConsumer(
                    await self.connection.channel(), wait_for_work, self.counts
                )
                await consumer.start(self.options, queues, self.worker_queue_ttl, prefetch)
                self.consumer = consumer
                return consumer
            except Exception as exc:  # the broker refused: closed the channel or connection
                if consumer is not None:
                    with contextlib.suppress(Exception):
                        await consumer.close()
                if attempt + 1 == CONSUME_ATTEMPTS or self._stopping.is_set():
                    raise
                # RabbitMQ 3.10 can refuse a consume on a quorum queue it has just
                # declared (its replica not up yet: INTERNAL_ERROR), at times by
                # closing the whole connection: a new channel then fails until the
                # robust connection is back (reconnect_interval). Both pass.
                logger.warning("the broker refused the consumer (%r): trying again", exc)
                await asyncio.sleep(0.1 * 2**attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def close(self) -> None:
        self._stopping.set()
        if self._starting is not None:
            # A connection attempt under way ends by itself (connected, refused
            # or timed out): cancelled halfway, the client leaves a connection
            # nobody closes.
            from conveyor.dispatch.broker import CONNECT_TIMEOUT

            await asyncio.wait({self._starting}, timeout=CONNECT_TIMEOUT + 1.0)
            self._starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._starting
            self._starting = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                await self.consumer.close()
        for connection in (self.publisher, self.connection):
            if connection is not None:
                with contextlib.suppress(Exception):
                    await connection.close()
        self.connection = self.publisher = None
        try:
            await self.counts.flush(self.store)
        except (BackendError, OSError) as exc:
            logger.warning("the last dispatch counts were not added to the store: %s", exc)


async def start_worker_dispatch(
    url: str,
    backend: Backend,
    *,
    worker_queue_ttl: float,
    events: EventBus,
    queues: Sequence[str],
    prefetch: int,
    use_wait: Callable[[WaitForWork], None],
) -> Dispatcher:
    """Start a worker's dispatch roles; once the broker answers, its consumer on
    ``queues`` (at most ``prefetch`` unacknowledged deliveries) is handed to
    ``use_wait`` as the claim loop's wait (until then the store's serves alone)."""
    dispatcher = Dispatcher(url, backend, worker_queue_ttl=worker_queue_ttl, events=events)
    await dispatcher.start()

    async def attach() -> None:
        consumer = await dispatcher.consume(queues, prefetch, backend.wait_for_work)
        use_wait(consumer.wait_for_work)

    dispatcher.spawn(attach(), "dispatch consumer")
    return dispatcher

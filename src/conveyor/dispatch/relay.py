"""The relay: publishes due jobs that have no message yet, with publisher
confirms. A batch is marked dispatched in the store first (one statement,
SKIP LOCKED: many relays are safe), then published as one message per queue
and job expiry, naming its jobs; what the broker did not confirm is marked
undispatched again. A relay that dies between the two leaves
jobs the reconciler republishes.

Idle, it sleeps until the store's NOTIFY says new work was committed (its own
LISTEN connection), or the next undispatched job comes due, or ``BACKSTOP``
at most; while that LISTEN is down it looks every ``IDLE_WAIT``. It takes a
job once it has been due ``PUBLISH_AGE``: until then a worker woken by the
store claims it without a message."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from conveyor.dispatch.counts import DispatchCounts
from conveyor.dispatch.messages import encode
from conveyor.dispatch.topology import DispatchOptions, declare_dead_letters, declare_queue
from conveyor.errors import BackendError

if TYPE_CHECKING:
    from aio_pika.abc import AbstractChannel, AbstractConnection

    from conveyor.backends.dispatchstore import Dispatchable, DispatchStore, RelayWakeups

logger = logging.getLogger("conveyor.dispatch")

#: Idle wait between takes without a live LISTEN (the relay's share of latency).
IDLE_WAIT = 0.02
#: Longest idle wait with a live LISTEN (a wake-up that never came).
BACKSTOP = 1.0
#: Between attempts to start the LISTEN after one failed.
LISTEN_RETRY = 5.0
#: How long a job is due before the relay takes it: workers woken by the
#: store's own NOTIFY claim a fresh job within milliseconds (tens on a loaded
#: host). A take at that moment would lock the row under their claim (a claim
#: skips locked rows) and send the job the long way round, through a publish
#: and a delivery; a job a claim took first needs no message at all. Counted
#: on the job's due time in the take itself, so a relay woken late or early
#: never takes a job younger than this.
PUBLISH_AGE = 0.05


def batches(
    items: list[Dispatchable],
) -> dict[tuple[str, float | None], list[Dispatchable]]:
    """The jobs of one message: same queue and same expiry (a message's
    expiration dead-letters every job it names), in take order."""
    groups: dict[tuple[str, float | None], list[Dispatchable]] = {}
    for item in items:
        groups.setdefault((item.queue, item.expires_at), []).append(item)
    return groups


class Relay:
    def __init__(
        self,
        store: DispatchStore,
        connection: AbstractConnection,
        options: DispatchOptions,
        worker_queue_ttl: float,
        counts: DispatchCounts | None = None,
        min_age: float = PUBLISH_AGE,
    ) -> None:
        self.store = store
        self.min_age = min_age
        self.connection = connection
        self.options = options
        self.worker_queue_ttl = worker_queue_ttl
        self.counts = counts if counts is not None else DispatchCounts()
        self._channel: AbstractChannel | None = None
        self._declared: set[str] = set()
        self._wake = asyncio.Event()
        self._wakeups: RelayWakeups | None = None
        self._listen_failed_at: float | None = None

    @property
    def published(self) -> int:
        """Jobs whose message the broker confirmed."""
        return self.counts.total("message", "confirmed")

    @property
    def failed(self) -> int:
        """Jobs given back: their message returned unroutable, nacked or never confirmed."""
        return self.counts.total("message", "returned") + self.counts.total(
            "message", "unconfirmed"
        )

    def wake(self) -> None:
        """Take again now (the reconciler undispatched jobs)."""
        self._wake.set()

    async def _open(self) -> AbstractChannel:
        if self._channel is None or self._channel.is_closed:
            # Mandatory publishes (aio-pika's default) that no queue takes raise
            # instead of being confirmed: a deleted queue loses no message.
            self._channel = await self.connection.channel(
                publisher_confirms=True, on_return_raises=True
            )
            self._declared.clear()
            await declare_dead_letters(self._channel, self.options)
        return self._channel

    async def run_once(self) -> int:
        """Publish one batch; returns how many jobs were taken."""
        from aiormq.exceptions import PublishError

        channel = await self._open()
        await self.store.ensure_index()
        items = await self.store.take(self.options.relay_batch, self.min_age)
        if not items:
            return 0
        unsent: list[Dispatchable] = []
        returned = 0
        try:
            for queue in sorted({item.queue for item in items} - self._declared):
                await declare_queue(channel, self.options, queue, self.worker_queue_ttl)
                self._declared.add(queue)
            now = time.time()
            exchange = channel.default_exchange
            groups = batches(items)
            self.counts.add("message", "published", len(items))
            results = await asyncio.gather(
                *(
                    exchange.publish(
                        encode(queue, group, now), routing_key=self.options.queue_name(queue)
                    )
                    for (queue, _), group in groups.items()
                ),
                return_exceptions=True,
            )
            for group, result in zip(groups.values(), results, strict=True):
                if isinstance(result, Exception):
                    unsent.extend(group)
                    returned += len(group) if isinstance(result, PublishError) else 0
        except BaseException:
            unsent = items
            raise
        finally:
            self.counts.add("message", "confirmed", len(items) - len(unsent))
            self.counts.add("message", "returned", returned)
            self.counts.add("message", "unconfirmed", len(unsent) - returned)
            if unsent:
                # A queue may be gone (deleted, or a broker without it): declare again.
                self._declared.clear()
                await self._give_back(unsent)
        return len(items)

    async def _give_back(self, items: list[Dispatchable]) -> None:
        try:
            await asyncio.shield(self.store.untake(items))
        except (BackendError, OSError) as exc:
            # The reconciler republishes them after reconcile_after.
            logger.warning("could not mark %d unpublished jobs undispatched: %s", len(items), exc)

    async def _listen(self) -> None:
        """Start the LISTEN; the relay polls every IDLE_WAIT while it is down."""
        if self._wakeups is not None:
            return
        failed_at = self._listen_failed_at
        if failed_at is not None and time.monotonic() - failed_at < LISTEN_RETRY:
            return
        wakeups = self.store.wakeups(self.wake)
        try:
            await wakeups.start()
        except Exception as exc:  # whatever the store's client raises: poll instead
            logger.warning("relay: no LISTEN on the store (polling): %s", exc)
            self._listen_failed_at = time.monotonic()
            await wakeups.shutdown()
            return
        self._wakeups = wakeups

    async def _idle_wait(self) -> float:
        """How long to sleep when nothing was left to take."""
        if self._wakeups is None or not self._wakeups.connected:
            return IDLE_WAIT
        try:
            due = await self.store.next_due()
        except (BackendError, OSError):
            return IDLE_WAIT
        if due is None:
            return BACKSTOP
        return min(BACKSTOP, max(IDLE_WAIT, due + self.min_age - time.time()))

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            if self._wakeups is not None:
                await self._wakeups.shutdown()
                self._wakeups = None

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                await self._listen()
                # Cleared before the take: a NOTIFY during it means take again.
                self._wake.clear()
                taken = await self.run_once()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # broker or store down: retry, never stop
                failures += 1
                delay = min(0.05 * 2**failures, 5.0)
                logger.warning("relay failed (retrying in %.2fs): %s", delay, exc)
                await asyncio.sleep(delay)
                continue
            if taken >= self.options.relay_batch:
                continue
            wait = await self._idle_wait()
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow
            # a cancel that lands as the wake-up does (the relay then outlives
            # its dispatcher's close, which waits for it forever).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            if self._wake.is_set() and self.min_age > 0:
                # Woken by new work: it is old enough to take PUBLISH_AGE later.
                await asyncio.sleep(self.min_age)

"""A worker's consumer: deliveries on its queues wake its claim loop, which
claims in the store as always (priorities, FIFO, TTL, pauses, circuits, rate
limits, caps and leases unchanged). A delivery is acknowledged once a claim
sent after it arrived has returned: that claim saw its job, took it or found
it already gone (a duplicate or stale delivery claims nothing). The broker
holds at most ``prefetch`` unacknowledged deliveries per worker."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from conveyor.dispatch.counts import DispatchCounts
from conveyor.dispatch.topology import DispatchOptions, declare_queue

if TYPE_CHECKING:
    from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

logger = logging.getLogger("conveyor.dispatch")

WaitForWork = Callable[[Sequence[str], float], Coroutine[Any, Any, None]]


class WorkerConsumer:
    def __init__(
        self,
        channel: AbstractChannel,
        wait_for_work: WaitForWork,
        counts: DispatchCounts | None = None,
    ) -> None:
        self.channel = channel
        self._store_wait = wait_for_work
        self.counts = counts if counts is not None else DispatchCounts()
        self._held: list[AbstractIncomingMessage] = []
        #: How many of _held arrived before the last claim was sent.
        self._covered = 0
        self._arrived = asyncio.Event()

    @property
    def delivered(self) -> int:
        return self.counts.total("message", "delivered")

    @property
    def redelivered(self) -> int:
        return self.counts.total("message", "redelivered")

    async def start(
        self,
        options: DispatchOptions,
        queues: Sequence[str],
        worker_queue_ttl: float,
        prefetch: int,
    ) -> None:
        await self.channel.set_qos(prefetch_count=max(1, prefetch))
        for queue in queues:
            declared = await declare_queue(self.channel, options, queue, worker_queue_ttl)
            await declared.consume(self._on_message)

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        self.counts.add("message", "delivered")
        if message.redelivered:
            self.counts.add("message", "redelivered")
        self._held.append(message)
        self._arrived.set()

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        """The claim loop's wait: returns on a delivery, on the store's own
        signal, or after ``timeout`` (the store's poll stays the backstop)."""
        await self._ack_covered()
        if self._held:
            # Arrived while the last claim was in flight: claim again first.
            self._covered = len(self._held)
            return
        self._arrived.clear()
        waiters = {
            asyncio.ensure_future(self._arrived.wait()),
            asyncio.ensure_future(self._store_wait(queues, timeout)),
        }
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            self._covered = len(self._held)

    async def _ack_covered(self) -> None:
        done, self._held = self._held[: self._covered], self._held[self._covered :]
        self._covered = 0
        if not done:
            return
        # One frame per channel: every delivery on a channel up to its last
        # covered one is in ``done`` (deliveries arrive in tag order, and the
        # earlier ones were acked before), so "multiple" acks exactly these. A
        # reconnection brings a new channel whose tags start again: grouped.
        last: dict[int, AbstractIncomingMessage] = {}
        for message in done:
            key = id(message.channel)
            if key not in last or (message.delivery_tag or 0) > (last[key].delivery_tag or 0):
                last[key] = message
        for message in last.values():
            try:
                await message.ack(multiple=True)
            except Exception as exc:  # channel gone: the broker redelivers them
                logger.debug("could not ack deliveries: %s", exc)

    async def close(self) -> None:
        """Unacknowledged deliveries go back to their queues with the channel."""
        self._held.clear()
        if not self.channel.is_closed:
            await self.channel.close()

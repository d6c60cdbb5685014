"""The dead-letter handler: consumes the broker's dead-letter queue. A letter
names a batch of jobs; each whose dispatch is still the job's current one,
still due and unclaimed, fails ``expired`` with the broker's reason (from
``x-death``); any other job is left alone (the SQL fences it). A malformed
letter is logged and dropped; a store error requeues the letter."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from conveyor.dispatch.counts import DispatchCounts
from conveyor.dispatch.messages import death_reason, decode
from conveyor.errors import BackendError

if TYPE_CHECKING:
    from aio_pika.abc import AbstractIncomingMessage

    from conveyor.backends.dispatchstore import DispatchStore
    from conveyor.events import EventBus

logger = logging.getLogger("conveyor.dispatch")

#: Before a letter goes back after a store error (no hot loop while it is down).
REQUEUE_DELAY = 1.0


class DeadLetterHandler:
    def __init__(
        self,
        store: DispatchStore,
        events: EventBus | None = None,
        counts: DispatchCounts | None = None,
    ) -> None:
        self.store = store
        self.events = events
        self.counts = counts if counts is not None else DispatchCounts()

    @property
    def expired(self) -> int:
        return self.counts.total("dead_letter", "expired")

    @property
    def ignored(self) -> int:
        return self.counts.total("dead_letter", "ignored")

    @property
    def dropped(self) -> int:
        return self.counts.total("dead_letter", "dropped")

    async def handle(self, message: AbstractIncomingMessage) -> None:
        try:
            envelope = decode(message.body)
        except ValueError as exc:
            self.counts.add("dead_letter", "dropped")
            logger.warning("dropping a malformed dead letter (%s): %r", exc, message.body[:200])
            await message.ack()
            return
        reason = death_reason(dict(message.headers or {}))
        # A message names a batch: each job is fenced on its own, the expiries
        # sent together. After a store error the whole letter goes back; the
        # jobs failed already are fenced (ignored) when it comes again.
        results = await asyncio.gather(
            *(self.store.expire(job_id, stamp, reason) for job_id, stamp in envelope.jobs),
            return_exceptions=True,
        )
        failed = False
        for (job_id, _), result in zip(envelope.jobs, results, strict=True):
            if isinstance(result, BackendError | OSError):
                logger.warning("dead letter of job %s requeued: %s", job_id, result)
                failed = True
            elif isinstance(result, BaseException):
                raise result
            elif result is None:
                self.counts.add("dead_letter", "ignored")
            else:
                self.counts.add("dead_letter", "expired")
                if self.events is not None:
                    self.events.emit("expired", job=result)
                    self.events.emit("dead", job=result, reason="expired", error=result.error)
        if failed:
            self.counts.add("dead_letter", "requeued")
            await asyncio.sleep(REQUEUE_DELAY)
            await message.nack(requeue=True)
            return
        await message.ack()

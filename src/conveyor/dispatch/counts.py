"""What this process's dispatch roles did, counted in one place and sent two
ways: a ``dispatch`` event per count, from which a worker's ``--metrics-port``
builds its metrics (worker/metrics.py), and, flushed about once a second, the
store's running totals, which ``conveyor serve``'s ``/metrics`` reads for every
process at once. The relay's and the handler's per-job outcomes count jobs
(a message names a batch); the consumer's count deliveries.

| kind | outcome | counted by |
| --- | --- | --- |
| ``message`` | ``published`` | relay, a job named in a message sent to the broker |
| ``message`` | ``confirmed`` | relay, the broker confirmed its message |
| ``message`` | ``returned`` | relay, no queue took its message (unroutable): given back |
| ``message`` | ``unconfirmed`` | relay, its message nacked or its channel lost: given back |
| ``message`` | ``reconciled`` | reconciler, a due job's message gone: republished |
| ``message`` | ``delivered`` | consumer, a delivery (one message) to this worker |
| ``message`` | ``redelivered`` | consumer, of those, one the broker had sent before |
| ``dead_letter`` | ``expired`` | dead-letter handler, a job it names failed ``expired`` |
| ``dead_letter`` | ``ignored`` | dead-letter handler, a job it names had moved on (fenced) |
| ``dead_letter`` | ``dropped`` | dead-letter handler, a malformed letter |
| ``dead_letter`` | ``requeued`` | dead-letter handler, a store error: letter requeued |
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import TYPE_CHECKING, Literal

from conveyor.errors import BackendError

if TYPE_CHECKING:
    from conveyor.backends.dispatchstore import DispatchStore
    from conveyor.events import EventBus

logger = logging.getLogger("conveyor.dispatch")

Kind = Literal["message", "dead_letter"]

OUTCOMES: dict[Kind, tuple[str, ...]] = {
    "message": (
        "published",
        "confirmed",
        "returned",
        "unconfirmed",
        "reconciled",
        "delivered",
        "redelivered",
    ),
    "dead_letter": ("expired", "ignored", "dropped", "requeued"),
}

#: Between two flushes of the totals to the store.
FLUSH_INTERVAL = 1.0


class DispatchCounts:
    def __init__(self, events: EventBus | None = None) -> None:
        self.events = events
        self.totals: Counter[tuple[str, str]] = Counter()
        self._unflushed: Counter[tuple[str, str]] = Counter()

    def add(self, kind: Kind, outcome: str, n: int = 1) -> None:
        if n <= 0:
            return
        if outcome not in OUTCOMES[kind]:
            raise ValueError(f"unknown dispatch outcome {kind}/{outcome}")
        self.totals[kind, outcome] += n
        self._unflushed[kind, outcome] += n
        if self.events is not None:
            self.events.emit("dispatch", kind=kind, outcome=outcome, count=n)

    def total(self, kind: Kind, outcome: str) -> int:
        return self.totals[kind, outcome]

    async def flush(self, store: DispatchStore) -> None:
        """Add what was counted since the last flush to the store's totals;
        kept for the next flush when the store fails."""
        pending, self._unflushed = self._unflushed, Counter()
        if not pending:
            return
        write = asyncio.ensure_future(store.add_counts(pending))
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            # Let the write end, so that its counts are neither lost nor sent twice.
            await asyncio.wait([write])
            if write.cancelled() or write.exception() is not None:
                self._unflushed.update(pending)
            raise
        except BaseException:
            self._unflushed.update(pending)
            raise

    async def run(self, store: DispatchStore, every: float = FLUSH_INTERVAL) -> None:
        """Flush every ``every`` seconds until cancelled."""
        while True:
            await asyncio.sleep(every)
            try:
                await self.flush(store)
            except (BackendError, OSError) as exc:
                logger.warning("could not add the dispatch counts to the store: %s", exc)

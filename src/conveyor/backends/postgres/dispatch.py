"""The SQL side of RabbitMQ dispatch (conveyor.dispatch): what the relay takes
and marks, what the reconciler undispatches, what a broker dead letter fails.
Statements in dispatch.sql; none of them is on the enqueue/claim path. The
relay wakes on the store's own NOTIFY (:class:`RelayWakeups`). The
running totals of what the dispatch roles did live in their own table,
``dispatch_counts``, made on first use."""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import resources
from typing import LiteralString

from conveyor.backends.dispatchstore import Dispatchable
from conveyor.backends.namedsql import parse_named_blocks
from conveyor.backends.postgres.connection import Pool
from conveyor.backends.postgres.decode import job_from_row
from conveyor.backends.postgres.notify import Listener
from conveyor.backends.postgres.queries import substitute
from conveyor.errors import BackendError
from conveyor.job import Job

logger = logging.getLogger("conveyor.backends.postgres")


@dataclasses.dataclass(frozen=True, slots=True)
class DispatchQueries:
    ensure_index: LiteralString
    take: LiteralString
    untake: LiteralString
    reconcile: LiteralString
    expire: LiteralString
    lag: LiteralString
    ensure_counts: LiteralString
    add_counts: LiteralString
    has_counts: LiteralString
    counts: LiteralString
    next_due: LiteralString


_BLOCKS = parse_named_blocks(
    resources.files("conveyor.backends.postgres").joinpath("dispatch.sql").read_text("utf-8")
)


@functools.cache
def dispatch_queries(schema: str, channel: str) -> DispatchQueries:
    return DispatchQueries(**{k: substitute(v, schema, channel) for k, v in _BLOCKS.items()})


class RelayWakeups(Listener):
    """The store's NOTIFY on new work (sent at each commit that makes work
    available: enqueue, retry, release, resume), for any queue, on a LISTEN
    connection of the relay's own: calls ``on_wake``. The store's Listener
    reconnects by itself and wakes on reconnection (notifications may have
    been missed)."""

    def __init__(
        self, dsn: str, channel: str, connect_timeout: float, on_wake: Callable[[], None]
    ) -> None:
        super().__init__(dsn, channel, connect_timeout)
        self.on_wake = on_wake

    def notify(self, queues: Iterable[str]) -> None:
        self.on_wake()

    def notify_all(self) -> None:
        self.on_wake()


__all__ = ["DispatchStore", "Dispatchable", "RelayWakeups", "dispatch_queries"]


class DispatchStore:
    """The relay's, reconciler's and dead-letter handler's queries on one schema."""

    def __init__(self, pool: Pool, schema: str, channel: str) -> None:
        self.pool = pool
        self.q = dispatch_queries(schema, channel)
        self._indexed = False
        self._counting = False

    async def ensure_index(self) -> None:
        """The relay's partial index, built once without blocking writers."""
        if self._indexed:
            return
        try:
            await self.pool.execute("dispatch index", self.q.ensure_index)
        except BackendError as exc:
            # Another relay building it at the same moment: the relay works
            # without the index, only slower; the next start retries.
            logger.warning("could not create the dispatch index: %s", exc)
        self._indexed = True

    async def take(self, limit: int, min_age: float = 0.0) -> list[Dispatchable]:
        rows = await self.pool.fetch("dispatch take", self.q.take, limit, min_age)
        return [Dispatchable(r[0], r[1], r[2], r[3]) for r in rows]

    async def untake(self, items: Sequence[Dispatchable]) -> None:
        if items:
            ids = [item.id for item in items]
            stamps = [item.stamp for item in items]
            await self.pool.execute("dispatch untake", self.q.untake, ids, stamps)

    async def reconcile(self, older_than: float, limit: int) -> int:
        rows = await self.pool.fetch("dispatch reconcile", self.q.reconcile, older_than, limit)
        return len(rows)

    async def expire(self, job_id: str, stamp: float, message: str) -> Job | None:
        rows = await self.pool.fetch("dispatch expire", self.q.expire, job_id, stamp, message)
        return job_from_row(rows[0]) if rows else None

    async def lag(self) -> float:
        return float(await self.pool.fetchval("dispatch lag", self.q.lag))

    async def add_counts(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Add ``counts`` ((kind, outcome) -> n) to the store's running totals."""
        if not counts:
            return
        if not self._counting:
            try:
                await self.pool.execute("dispatch counts table", self.q.ensure_counts)
            except BackendError as exc:
                # Another process made it at the same moment (a unique violation
                # on the catalog): the table is there either way.
                logger.debug("dispatch counts table: %s", exc)
            self._counting = True
        kinds, outcomes = zip(*counts, strict=True)
        await self.pool.execute(
            "dispatch add counts",
            self.q.add_counts,
            list(kinds),
            list(outcomes),
            list(counts.values()),
        )

    async def counts(self) -> dict[tuple[str, str], int]:
        """Every process's running totals, (kind, outcome) -> n (empty before
        the first count)."""
        if not await self.pool.fetchval("dispatch has counts", self.q.has_counts):
            return {}
        rows = await self.pool.fetch("dispatch counts", self.q.counts)
        return {(r[0], r[1]): int(r[2]) for r in rows}

    async def next_due(self) -> float | None:
        """When the next undispatched job comes due (None: none waits)."""
        due = await self.pool.fetchval("dispatch next due", self.q.next_due)
        return float(due) if due is not None else None

    def wakeups(self, on_wake: Callable[[], None]) -> RelayWakeups:
        """A LISTEN on the store's work channel for the relay (not started)."""
        options = self.pool.options
        return RelayWakeups(options.dsn, options.channel, options.connect_timeout, on_wake)

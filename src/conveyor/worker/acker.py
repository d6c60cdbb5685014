"""Batches the outcomes of finished runs into one ``settle_jobs`` call."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from conveyor.backends.base import (
    Backend,
    CircuitInfo,
    ClaimRequest,
    ClaimResult,
    Settlement,
    SettleResult,
)
from conveyor.errors import BackendError
from conveyor.events import EventBus
from conveyor.job import Job

logger = logging.getLogger("conveyor.worker")

#: Pauses between retries of a failed flush: doubling from the first to the last.
RETRY_FIRST = 0.05
RETRY_MAX = 2.0


class Claimer(Protocol):
    """Who a flush may claim for (the worker, while it waits for work)."""

    def claim_with_settle(self) -> ClaimRequest | None:
        """The claim to send with the next flush, or None."""

    def claimed_with_settle(
        self, request: ClaimRequest, result: ClaimResult | None, sent_at: float
    ) -> None:
        """Its answer (``None``: the flush failed), sent at ``sent_at`` (monotonic)."""


class Acker:
    """Settlements wait here until the next flush; one flush = one round trip.

    While the worker waits for work (its last claim came back short), a flush
    also claims for it (``settle_and_claim``): what the outcomes released (a
    chain's next step) comes back with their answer, without a claim of its own.

    While a flush is in flight new outcomes gather, so batches grow with load
    by themselves. A failed flush is retried: settlements are fenced by their
    lease token, so sending one twice is harmless. Until an outcome is stored
    its job's lease is still needed: :meth:`unsettled` names them for the
    lease keeper to renew, or a store outage longer than the lease would have
    the job recovered and run again though it finished here.
    """

    def __init__(
        self,
        backend: Backend,
        on_refused: Callable[[set[str]], None],
        on_circuit: Callable[[list[CircuitInfo]], None],
        on_cancelled: Callable[[list[Job]], None],
        on_stored: Callable[[list[tuple[Settlement, Job]], SettleResult], Awaitable[None]]
        | None = None,
        events: EventBus | None = None,
        claimer: Claimer | None = None,
    ) -> None:
        self._backend = backend
        #: Asked before each flush for a claim to send with it (settle_and_claim).
        self.claimer = claimer
        #: ``settled`` (round-trip time) goes here; timed only while someone listens.
        self._events = events
        self._on_refused = on_refused
        self._on_circuit = on_circuit
        self._on_cancelled = on_cancelled
        self._on_stored = on_stored
        self._pending: list[tuple[Settlement, Job]] = []
        #: The batch whose ``settle_jobs`` call is out (retried while it fails).
        self._in_flight: list[tuple[Settlement, Job]] = []
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        #: Outcomes added so far, and how many of them have been sent and
        #: answered (stored, or refused); ``stored()`` waits on the second.
        self._added = 0
        self._answered = 0
        self._answer_waiters: list[tuple[int, asyncio.Future[None]]] = []

    def add(self, settlement: Settlement, job: Job) -> None:
        self._pending.append((settlement, job))
        self._added += 1
        self._idle.clear()
        self._ready.set()

    def add_many(self, settled: list[tuple[Settlement, Job]]) -> None:
        """:meth:`add` for many outcomes at once (a batch's)."""
        if not settled:
            return
        self._pending += settled
        self._added += len(settled)
        self._idle.clear()
        self._ready.set()

    @property
    def answered(self) -> bool:
        """Every outcome added so far has had its flush answered."""
        return self._answered >= self._added

    async def stored(self) -> None:
        """Until every outcome added so far has had its flush answered (later
        ones need not be): what that flush released is then claimable."""
        if self._answered >= self._added:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._answer_waiters.append((self._added, future))
        await future

    def _answered_up_to(self, count: int) -> None:
        self._answered += count
        waiting = []
        for target, future in self._answer_waiters:
            if target <= self._answered:
                if not future.done():
                    future.set_result(None)
            elif not future.done():
                waiting.append((target, future))
        self._answer_waiters = waiting

    def unsettled(self) -> list[tuple[str, str]]:
        """``(job id, lease token)`` of every outcome not stored yet, sent or not."""
        return [(s.job_id, s.lease_token) for s, _ in (*self._in_flight, *self._pending)]

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def idle(self) -> bool:
        """Every outcome added so far is stored."""
        return self._idle.is_set()

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            await self._flush_pending()

    async def _flush_pending(self) -> None:
        delay = RETRY_FIRST
        while self._pending:
            batch, self._pending = self._pending, []
            self._in_flight = batch
            events = (
                self._events if self._events is not None and self._events.has("settled") else None
            )
            sent_at = time.perf_counter() if events is not None else 0.0
            request = self.claimer.claim_with_settle() if self.claimer is not None else None
            claim_sent_at = time.monotonic()
            try:
                if request is None:
                    result = await self._backend.settle_jobs([s for s, _ in batch])
                else:
                    result, claimed = await self._backend.settle_and_claim(
                        [s for s, _ in batch], request
                    )
            except (BackendError, OSError) as exc:
                if request is not None and self.claimer is not None:
                    self.claimer.claimed_with_settle(request, None, claim_sent_at)
                logger.warning("could not store %d outcomes, retrying: %s", len(batch), exc)
                self._pending[:0] = batch
                self._in_flight = []
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
                continue
            self._in_flight = []
            # Under steady load this loop may never end: the next outage must
            # start again from a short pause, not the longest one.
            delay = RETRY_FIRST
            if events is not None:
                events.emit("settled", count=len(batch), seconds=time.perf_counter() - sent_at)
            if request is not None and self.claimer is not None:
                # Taken before the answer counts: a claim loop waiting for it
                # sees what this claim took.
                self.claimer.claimed_with_settle(request, claimed, claim_sent_at)
            # Before the callbacks below (they may await): a claim loop waiting
            # for these outcomes claims what they released at once.
            self._answered_up_to(len(batch))
            if result.refused:
                self._on_refused(result.refused)
            if result.circuit_changes:
                self._on_circuit(result.circuit_changes)
            if result.cancelled:
                self._on_cancelled([job for s, job in batch if s.job_id in result.cancelled])
            if self._on_stored is not None:
                await self._on_stored(batch, result)
        self._idle.set()

    async def drain_at_exit(self, timeout: float = 10.0) -> None:
        """The last flush before the worker exits; says what could not be stored."""
        if not await self.drain(timeout):
            logger.error(
                "%d outcome(s) could not be stored before exit; their jobs will be "
                "recovered as stalled",
                self.pending,
            )

    async def drain(self, timeout: float) -> bool:
        """Flush everything (at shutdown, or a burst's look); False if not within ``timeout``."""
        if self._pending:
            self._ready.set()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

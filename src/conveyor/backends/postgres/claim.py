"""claim_jobs (one call of the schema's ``claim`` function) and wait_for_work
(LISTEN/NOTIFY through notify.py, with the next due delayed job as a timer)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import asyncpg
from asyncpg import Record

from conveyor.backends.base import ClaimRequest, ClaimResult
from conveyor.backends.postgres.connection import Pool
from conveyor.backends.postgres.decode import claim_order, job_from_row
from conveyor.backends.postgres.notify import Listener
from conveyor.backends.postgres.queries import Queries
from conveyor.errors import BackendError
from conveyor.ids import new_token
from conveyor.job import Job, JobState

logger = logging.getLogger("conveyor.backends.postgres")

#: Added to a delayed job's due time, so the claim after the wait sees it as due.
DUE_SLACK = 0.002
#: After the listening connection failed to start, wait this long before trying again.
LISTEN_RETRY = 1.0


def claim_args(request: ClaimRequest) -> tuple[Any, ...]:
    """The ``claim`` function's arguments for ``request`` (a fresh lease token)."""
    caps = request.task_limits
    rates = request.rate_limits
    keys = request.key_limits
    key_rates = request.key_rate_limits
    return (
        list(dict.fromkeys(request.queues)),
        request.limit,
        request.lease,
        request.worker_id,
        new_token(),
        list(caps) if caps else None,
        list(caps.values()) if caps else None,
        list(rates) if rates else None,
        [r.limit for r in rates.values()] if rates else None,
        [float(r.period) for r in rates.values()] if rates else None,
        request.circuit_tasks,
        list(keys) if keys else None,
        list(keys.values()) if keys else None,
        list(key_rates) if key_rates else None,
        [r.limit for r in key_rates.values()] if key_rates else None,
        [float(r.period) for r in key_rates.values()] if key_rates else None,
    )


def claim_result(rows: Sequence[Record]) -> ClaimResult:
    """Claimed (active) and TTL-expired jobs from ``claim``'s rows, in claim order."""
    claimed: list[Job] = []
    expired: list[Job] = []
    for row in rows:
        job = job_from_row(row)
        (claimed if job.state is JobState.ACTIVE else expired).append(job)
    claimed.sort(key=claim_order)
    return ClaimResult(claimed, expired)


async def claim_jobs(pool: Pool, q: Queries, request: ClaimRequest) -> ClaimResult:
    args = claim_args(request)
    return claim_result(await pool.fetch("claim", q.claim, *args))


class Waits:
    """wait_for_work on a :class:`Listener`, which LISTENs from the first wait
    on (producers never open the extra connection)."""

    def __init__(self, pool: Pool, q: Queries, listener: Listener) -> None:
        self._pool = pool
        self._q = q
        self._listener = listener
        self.enabled = False
        """Set while the backend is open: only then may a wait start listening."""
        self._listening = False
        self._listen_failed_at = 0.0
        self._listen_start: asyncio.Future[None] | None = None

    async def close(self) -> None:
        self.enabled = False
        start, self._listen_start = self._listen_start, None
        if start is not None:
            await asyncio.gather(start, return_exceptions=True)
        self._listening = False
        await self._listener.shutdown()

    async def wait(self, queues: Sequence[str], timeout: float) -> None:
        wanted = frozenset(queues)
        if self._listener.take_pending(wanted):
            return
        future = self._listener.add(wanted)
        try:
            was_listening = self._listening
            await self._ensure_listening()
            # A NOTIFY sent before LISTEN reached nobody: look for its work.
            if not was_listening and self._listening and await self._has_waiting(wanted):
                return
            if wanted and timeout > 0 and not future.done():
                try:
                    due = await self._pool.fetchval("next due", self._q.next_due, sorted(wanted))
                except BackendError:
                    due = None  # the next claim reports the outage
                if due is not None:
                    timeout = min(timeout, due - time.time() + DUE_SLACK)
            if timeout > 0 and not future.done():
                await asyncio.wait([future], timeout=timeout)
        finally:
            self._listener.remove(future)

    async def _has_waiting(self, queues: frozenset[str]) -> bool:
        try:
            waiting = await self._pool.fetchval("has waiting", self._q.has_waiting, sorted(queues))
            return bool(waiting)
        except BackendError:
            return False  # the next claim reports the outage

    async def _ensure_listening(self) -> None:
        if self._listening or not self.enabled:
            return
        if time.monotonic() - self._listen_failed_at < LISTEN_RETRY:
            return
        if self._listen_start is None or self._listen_start.done():
            # One start for every concurrent waiter.
            self._listen_start = asyncio.ensure_future(self._start_listening())
        await asyncio.shield(self._listen_start)

    async def _start_listening(self) -> None:
        try:
            await self._listener.start()
            self._listening = True
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            self._listen_failed_at = time.monotonic()
            logger.warning("cannot LISTEN for new work (polling instead): %r", exc)

"""Receiving handoffs: jobs that enqueues claimed for this worker while it was
idle (backends with :attr:`~conveyor.backends.base.Backend.hands_off`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from conveyor.backends.base import Backend, ClaimResult
from conveyor.errors import BackendError

logger = logging.getLogger("conveyor.worker")

#: How long one wait for handed-off jobs blocks (seconds); the shutdown ends it sooner.
POP_TIMEOUT = 5.0

#: Takes claimed jobs and the monotonic time their lease counts from.
Take = Callable[[ClaimResult, float], None]


class HandoffReceiver:
    """Pops handed-off jobs into the worker (``take``) until :meth:`end`. Such
    jobs may come while a claim of the worker is in flight: it then holds a few
    more than its slots (buffered)."""

    def __init__(self, backend: Backend, worker_id: str, lease: float, take: Take) -> None:
        self._backend = backend
        self._worker_id = worker_id
        self._lease = lease
        self._take = take
        self._task: asyncio.Task[None] | None = None

    def started(self, task: asyncio.Task[None]) -> None:
        """The task running :meth:`run` (so that :meth:`end` can wait for it)."""
        self._task = task

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                handed = await self._backend.next_handoff(self._worker_id, POP_TIMEOUT)
                failures = 0
            except (BackendError, OSError) as exc:
                failures += 1
                delay = min(0.05 * 2**failures, 5.0)
                logger.warning("handoff pop failed (retrying in %.2fs): %s", delay, exc)
                await asyncio.sleep(delay)
                continue
            if handed is None:
                return
            for handoff in handed:
                self._take(handoff.result, handoff.leased_at)
            # The jobs just taken start before the next pop is sent: sending it
            # first delayed each handed job by the client work of a pop.
            await asyncio.sleep(0)

    async def end(self) -> None:
        """No more handoffs: the ones not popped yet are taken (then released)."""
        if self._task is None:
            return
        sent_at = time.monotonic()
        try:
            left = await self._backend.end_handoffs(self._worker_id, self._lease)
        except (BackendError, OSError) as exc:
            # The registration runs out by itself; what is still handed is
            # released as it arrives (take), and an inbox never popped comes
            # back by stall recovery.
            logger.warning("could not end handoffs: %s", exc)
            return
        self._take(left, sent_at)
        await asyncio.wait({self._task}, timeout=POP_TIMEOUT)

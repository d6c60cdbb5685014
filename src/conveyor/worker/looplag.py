"""Warns when the worker's event loop was blocked long enough to risk its leases.

A handler that blocks the loop (a sync call inside ``async def``) stops lease
renewals, heartbeats and every other job of the worker. The watchdog sleeps a
short interval and measures how late it woke: past ``lease / 3`` (a renewal
was missed) it logs a WARNING naming the running jobs. One timer per interval:
nothing on any job's path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

logger = logging.getLogger("conveyor.worker")


class LoopWatchdog:
    def __init__(self, lease: float, running: Callable[[], Iterable[str]]) -> None:
        self.threshold = lease / 3
        self.interval = min(1.0, self.threshold / 2)
        self._running = running
        #: The longest lag seen (seconds), for tests and ``describe``.
        self.worst = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.interval)
            lag = loop.time() - before - self.interval
            self.worst = max(self.worst, lag)
            if lag > self.threshold:
                jobs = sorted(self._running())
                logger.warning(
                    "event loop blocked for %.2fs (lease renewal is due every %.2fs): "
                    "a handler is blocking it; leases may be lost. Running: %s",
                    lag,
                    self.threshold,
                    ", ".join(jobs[:10]) + (" …" if len(jobs) > 10 else "") or "nothing",
                )

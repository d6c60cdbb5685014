"""Writes this worker's heartbeat every ``heartbeat_interval``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from conveyor.backends.base import Backend, WorkerInfo
from conveyor.errors import BackendError

logger = logging.getLogger("conveyor.worker")


class Heartbeat:
    def __init__(
        self, backend: Backend, describe: Callable[[], WorkerInfo], interval: float
    ) -> None:
        self._backend = backend
        self._describe = describe
        self._interval = interval

    async def beat(self) -> None:
        await self._backend.record_heartbeat(self._describe())

    async def run(self) -> None:
        while True:
            try:
                await self.beat()
            except (BackendError, OSError) as exc:
                logger.warning("heartbeat failed: %s", exc)
            await asyncio.sleep(self._interval)

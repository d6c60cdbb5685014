"""Run a maintenance pass every interval; a failing pass is logged and retried."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from conveyor.errors import BackendError

logger = logging.getLogger("conveyor.maintenance")


async def every(interval: float, run_once: Callable[[], Awaitable[object]], name: str) -> None:
    while True:
        try:
            await run_once()
        except (BackendError, OSError) as exc:
            logger.warning("%s pass failed, will retry: %s", name, exc)
        await asyncio.sleep(interval)

"""One robust connection to the broker per process role, opened with retries:
aio-pika's robust connection reconnects and re-declares its channels, queues
and consumers by itself once it was open."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aio_pika.abc import AbstractRobustConnection

logger = logging.getLogger("conveyor.dispatch")

CONNECT_TIMEOUT = 5.0
#: Between reconnection attempts once connected (aio-pika's default is 5 s);
#: ``?reconnect_interval=`` on the dispatch URL overrides it.
RECONNECT_INTERVAL = 1.0


async def connect(url: str, stopping: asyncio.Event) -> AbstractRobustConnection | None:
    """Connect, retrying with backoff until connected or ``stopping`` is set (None)."""
    import aio_pika

    extra: dict[str, Any] = (
        {} if "reconnect_interval=" in url else {"reconnect_interval": RECONNECT_INTERVAL}
    )
    delay = 0.1
    while not stopping.is_set():
        try:
            connection: AbstractRobustConnection = await aio_pika.connect_robust(
                url, timeout=CONNECT_TIMEOUT, **extra
            )
            return connection
        except (TimeoutError, OSError, aio_pika.exceptions.AMQPError) as exc:
            logger.warning("broker unreachable (retrying in %.1fs): %s", delay, exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), delay)
        delay = min(delay * 2, 5.0)
    return None

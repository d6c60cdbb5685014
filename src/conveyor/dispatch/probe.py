"""What the operators' tools read from the broker (health checks, ``/metrics``,
``conveyor queues``, the dashboard): a ping, and the depth of conveyor's queues
there. One plain connection, opened on first use and again once it dropped;
nothing is declared (passive declarations only), so a probe never creates a
queue nor disagrees with the workers about arguments."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from conveyor.dispatch.topology import parse_dispatch_url

if TYPE_CHECKING:
    from aio_pika.abc import AbstractChannel, AbstractConnection

    from conveyor.backends.base import Backend

#: A broker slower than this to answer counts as down.
PROBE_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class BrokerHealth:
    up: bool
    latency: float | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        if not self.up:
            return {"status": "unavailable", "error": self.error}
        latency = round((self.latency or 0.0) * 1000, 3)
        return {"status": "up", "latency_ms": latency}


@dataclass(frozen=True, slots=True)
class BrokerDepth:
    """A broker queue's ready messages and consumers (AMQP reports no unacked count)."""

    messages: int
    consumers: int


class BrokerProbe:
    def __init__(self, url: str, timeout: float = PROBE_TIMEOUT) -> None:
        from conveyor.dispatch import require_client

        require_client()
        self.options = parse_dispatch_url(url)
        self.timeout = timeout
        self._connection: AbstractConnection | None = None
        self._lock = asyncio.Lock()

    async def _channel(self) -> AbstractChannel:
        import aio_pika

        async with self._lock:
            if self._connection is None or self._connection.is_closed:
                self._connection = await aio_pika.connect(self.options.url, timeout=self.timeout)
            connection = self._connection
        return await connection.channel()

    async def check(self) -> BrokerHealth:
        """Open (and close) a channel; never raises."""
        started = time.perf_counter()
        try:
            channel = await asyncio.wait_for(self._channel(), self.timeout)
            await channel.close()
        except Exception as exc:  # any failure to answer is the broker being down
            await self._drop()
            return BrokerHealth(False, error=f"broker: {exc or type(exc).__name__}")
        return BrokerHealth(True, latency=time.perf_counter() - started)

    async def depths(self, queues: Iterable[str]) -> dict[str, BrokerDepth | None]:
        """Per conveyor queue, its broker queue's depth (None: not declared yet).
        Raises when the broker cannot be reached."""
        return await asyncio.wait_for(self._depths(list(queues)), self.timeout)

    async def dead_letters(self) -> int | None:
        """Messages in the broker's dead-letter queue (None: not declared yet)."""
        name = self.options.dead_letter_queue
        depth = await asyncio.wait_for(self.depths_by_name([name]), self.timeout)
        found = depth[name]
        return found.messages if found is not None else None

    async def _depths(self, queues: list[str]) -> dict[str, BrokerDepth | None]:
        by_name = await self.depths_by_name([self.options.queue_name(q) for q in queues])
        return {q: by_name[self.options.queue_name(q)] for q in queues}

    async def depths_by_name(self, names: list[str]) -> dict[str, BrokerDepth | None]:
        import aio_pika

        found: dict[str, BrokerDepth | None] = {}
        channel = await self._channel()
        try:
            for name in names:
                if channel.is_closed:
                    channel = await self._channel()
                try:
                    queue = await channel.declare_queue(name, passive=True)
                except aio_pika.exceptions.ChannelNotFoundEntity:
                    found[name] = None  # the broker closed the channel: a new one next
                    continue
                result = queue.declaration_result
                found[name] = BrokerDepth(result.message_count or 0, result.consumer_count or 0)
        finally:
            if not channel.is_closed:
                with contextlib.suppress(Exception):
                    await channel.close()
        return found

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()

    async def close(self) -> None:
        await self._drop()


async def dispatch_counts(backend: Backend) -> dict[tuple[str, str], int] | None:
    """Every process's dispatch counts, (kind, outcome) -> total (None: the
    store keeps no dispatch record)."""
    factory = getattr(backend, "dispatch_store", None)
    if factory is None:
        return None
    counts: dict[tuple[str, str], int] = await factory().counts()
    return counts


async def dispatch_lag(backend: Backend) -> float | None:
    """Seconds the oldest due job has waited for its publish (None: the store
    keeps no dispatch record)."""
    factory = getattr(backend, "dispatch_store", None)
    if factory is None:
        return None
    lag: float = await factory().lag()
    return lag

"""Wake-ups for ``wait_for_work`` from the app's pub/sub channel.

Scripts that make work due publish on ``{conveyor:<prefix>}:wake``:
``q:<queue>`` (new waiting work), ``t:`` (a new delayed job: re-check the next
due time) or ``a:`` (anything may be claimable: a circuit was reset). One
listener task per backend instance holds a subscription and wakes the waiters
of this process; a notification for a queue nobody waits on is kept as pending,
so a worker between a claim and its next wait does not miss it. When the
subscription is down, waiters simply time out (polling is the fallback).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from conveyor.backends.worksignal import PendingQueues

logger = logging.getLogger("conveyor.backends.redis")

#: A future's result: True = new work, False = re-check the next due time.
Waiter = asyncio.Future[bool]


class WakeListener:
    def __init__(self, make_client: Callable[[], Any], channel: str) -> None:
        self._make_client = make_client
        self._channel = channel
        self._waiters: dict[Waiter, frozenset[str]] = {}
        self._pending = PendingQueues()
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        self._closed = False
        # Bumped per ``t:`` / ``a:`` notification, so a waiter that was busy
        # (reading the next due time) sees one that came meanwhile.
        self.timers = 0
        self.broadcasts = 0

    def start(self) -> None:
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._listen())

    @property
    def live(self) -> bool:
        """Whether the subscription is up (notifications reach this process)."""
        return self._subscribed.is_set()

    async def ready(self, timeout: float) -> None:
        """Wait (at most ``timeout``) until the subscription is live."""
        if not self._subscribed.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._subscribed.wait(), timeout)

    def take_pending(self, queues: frozenset[str]) -> bool:
        return self._pending.take(queues)

    def add(self, queues: frozenset[str]) -> Waiter:
        future: Waiter = asyncio.get_running_loop().create_future()
        self._waiters[future] = queues
        return future

    def remove(self, future: Waiter) -> None:
        self._waiters.pop(future, None)
        if not future.done():
            future.cancel()

    def _deliver(self, data: bytes) -> None:
        kind, _, name = data.decode("utf-8", "replace").partition(":")
        if kind == "a":
            self.broadcasts += 1
        elif kind == "t":
            self.timers += 1
        if kind == "q":
            woken = False
            for future, wanted in self._waiters.items():
                if name in wanted and not future.done():
                    future.set_result(True)
                    woken = True
            if not woken:
                self._pending.add((name,))
        else:
            work = kind == "a"
            for future in self._waiters:
                if not future.done():
                    future.set_result(work)

    async def _listen(self) -> None:
        delay = 0.05
        while not self._closed:
            client = None
            pubsub = None
            try:
                client = self._make_client()
                pubsub = client.pubsub()
                await pubsub.subscribe(self._channel)
                self._subscribed.set()
                delay = 0.05
                # Anything may have happened while we were not listening.
                self._deliver(b"a:")
                while not self._closed:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
                    if message is not None and message.get("type") == "message":
                        self._deliver(message["data"])
            except (RedisError, OSError) as exc:
                self._subscribed.clear()
                logger.debug("wake-up subscription lost (%s); retrying in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
            except Exception:  # a bug must not end the wake-ups: log it, poll meanwhile
                self._subscribed.clear()
                logger.exception("wake-up listener failed; retrying in %.2fs", delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
            finally:
                self._subscribed.clear()
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        await pubsub.aclose()
                if client is not None:
                    with contextlib.suppress(Exception):
                        await client.aclose()

    async def close(self) -> None:
        self._closed = True
        for future in self._waiters:
            if not future.done():
                future.set_result(True)
        self._pending.clear()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

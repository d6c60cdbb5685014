"""In-process wake-ups for ``wait_for_work``: waiters by queue set.

A backend calls :meth:`WorkSignal.notify` when work became available in some
queues (this process committed it, or a notification from the server said
so) and :meth:`WorkSignal.notify_all` when anything may have changed (SQLite:
another process committed; PostgreSQL: the LISTEN connection came back).

A notification for a queue nobody waits on is kept as pending, so a worker
that was between a claim and its next wait does not miss it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class PendingQueues:
    """Queues notified while nobody listening to them waited: the next wait on
    one of them returns at once instead of sleeping through that work."""

    def __init__(self) -> None:
        self._names: set[str] = set()

    def add(self, names: Iterable[str]) -> None:
        self._names.update(names)

    def take(self, queues: frozenset[str]) -> bool:
        """Consume the pending notifications for ``queues``; True if there were any."""
        hit = self._names & queues
        if hit:
            self._names -= hit
            return True
        return False

    def clear(self) -> None:
        self._names.clear()


class WorkSignal:
    """Waiters by queue set. Used from the event loop thread only."""

    def __init__(self) -> None:
        self._waiters: dict[asyncio.Future[None], frozenset[str]] = {}
        self._pending = PendingQueues()

    @property
    def has_waiters(self) -> bool:
        return bool(self._waiters)

    def take_pending(self, queues: frozenset[str]) -> bool:
        """Consume a pending notification for any of ``queues``."""
        return self._pending.take(queues)

    def add(self, queues: frozenset[str]) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[future] = queues
        return future

    def remove(self, future: asyncio.Future[None]) -> None:
        self._waiters.pop(future, None)
        if not future.done():
            future.cancel()

    def notify(self, queues: Iterable[str]) -> None:
        """New work in ``queues`` (called on the loop, after the commit)."""
        names = set(queues)
        if not names:
            return
        woken: set[str] = set()
        for future, wanted in self._waiters.items():
            hit = wanted & names
            if hit and not future.done():
                future.set_result(None)
                woken |= hit
        self._pending.add(names - woken)

    def notify_all(self) -> None:
        """Something changed somewhere (another process committed): wake everyone."""
        for future in self._waiters:
            if not future.done():
                future.set_result(None)

    def close(self) -> None:
        self.notify_all()
        self._pending.clear()

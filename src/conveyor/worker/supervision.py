"""The worker's side roles (acker, lease keeper, heartbeat, statistics,
maintenance, handoffs) run as tasks; one that dies stops the worker loudly."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from conveyor.events import EventBus

logger = logging.getLogger("conveyor.worker")


class SideRoles:
    def __init__(self, events: EventBus, stop_worker: Callable[[], None]) -> None:
        self._events = events
        self._stop_worker = stop_worker
        self._tasks: list[asyncio.Task[Any]] = []
        self._may_end: set[str] = set()
        #: Why the worker stopped, when a role died.
        self.crash: BaseException | None = None

    def start(self, name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=f"conveyor {name}")
        task.add_done_callback(lambda t: self._done(name, t))
        self._tasks.append(task)
        return task

    def may_end(self, name: str) -> None:
        """From now on role ``name`` may return without stopping the worker
        (the handoff receiver ends with the shutdown)."""
        self._may_end.add(name)

    def _done(self, name: str, task: asyncio.Task[Any]) -> None:
        if task.cancelled() or self.crash is not None:
            return
        exc = task.exception()
        if exc is None and name in self._may_end:
            return
        logger.critical("worker role %r died: %r; stopping the worker", name, exc)
        self.crash = exc or RuntimeError(f"{name} returned")
        self._events.emit("error", error=self.crash, where=name)
        self._stop_worker()

    async def cancel_all(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

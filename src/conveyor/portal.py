"""A private event loop in a daemon thread, so sync code can call the async API."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from conveyor.app import Conveyor

T = TypeVar("T")


class Portal:
    """Owns a second app on its own loop (backends are bound to one loop)."""

    def __init__(self, owner: Conveyor) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="conveyor-portal", daemon=True
        )
        self._thread.start()
        # The owner's tasks and queues, so that task defaults and queue limits apply.
        self._app = owner._twin()

    def call(self, fn: Callable[[Conveyor], Awaitable[T]]) -> T:
        async def run() -> T:
            return await fn(self._app)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result()

    def close(self) -> None:
        if not self._loop.is_closed() and self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._app.close(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()

    def __del__(self) -> None:  # best effort for scripts that never close the app
        with contextlib.suppress(Exception):  # interpreter shutdown: nothing left to tell
            self.close()

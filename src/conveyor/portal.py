"""A private event loop in a daemon thread, so sync code can call the async API."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from conveyor.runtime import Runtime

T = TypeVar("T")


class Portal:
    """Owns a twin runtime on its own loop (backends are bound to one loop)."""

    def __init__(self, owner: Runtime) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="conveyor-portal", daemon=True
        )
        self._thread.start()
        # The owner's tasks and queues, so that task defaults and queue limits apply.
        self._runtime = owner.twin()

    def call(self, fn: Callable[[Runtime], Awaitable[T]]) -> T:
        async def run() -> T:
            return await fn(self._runtime)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result()

    def close(self) -> None:
        if not self._loop.is_closed() and self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._runtime.close(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()

    def __del__(self) -> None:  # best effort for scripts that never close the app
        with contextlib.suppress(Exception):  # interpreter shutdown: nothing left to tell
            self.close()

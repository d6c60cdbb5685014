"""The stall reaper: jobs whose lease expired go back to waiting, or fail
``stalled`` once they stalled ``max_stalled`` times or have no attempt left."""

from __future__ import annotations

from conveyor.backends.base import Backend, StallResult
from conveyor.events import EventBus


class StallReaper:
    def __init__(self, backend: Backend, events: EventBus, max_stalled: int) -> None:
        self._backend = backend
        self._events = events
        self._max_stalled = max_stalled

    async def run_once(self) -> StallResult:
        result = await self._backend.recover_stalled(self._max_stalled)
        events = self._events
        for job in result.requeued:
            events.emit("stalled", job=job, requeued=True)
        for job in result.cancelled:  # a cancel was pending: it wins over a retry
            events.emit("stalled", job=job, requeued=False)
            events.emit("cancelled", job=job)
        for job in result.failed:
            events.emit("stalled", job=job, requeued=False)
            events.emit("dead", job=job, reason="stalled", error=job.error)
        return result

"""The stall reaper: jobs whose lease expired go back to waiting, or fail
``stalled`` once they stalled ``max_stalled`` times or have no attempt left."""

from __future__ import annotations

from typing import TYPE_CHECKING

from conveyor.backends.base import StallResult

if TYPE_CHECKING:
    from conveyor.app import Conveyor


class StallReaper:
    def __init__(self, app: Conveyor) -> None:
        self._app = app

    async def run_once(self) -> StallResult:
        app = self._app
        result = await app.backend.recover_stalled(app.settings.max_stalled)
        events = app.events
        for job in result.requeued:
            events.emit("stalled", job=job, requeued=True)
        for job in result.cancelled:  # a cancel was pending: it wins over a retry
            events.emit("stalled", job=job, requeued=False)
            events.emit("cancelled", job=job)
        for job in result.failed:
            events.emit("stalled", job=job, requeued=False)
            events.emit("dead", job=job, reason="stalled", error=job.error)
        return result

"""The worker's record of one job it is running."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

from conveyor.context import JobContext
from conveyor.job import Job

#: Why the worker interrupted a handler: its timeout, a user's cancel, the
#: two-phase shutdown, or a lease the worker can no longer trust (G4).
StopReason = Literal["timeout", "cancel", "shutdown", "lease_lost"]


@dataclass(slots=True, eq=False)
class Running:
    job: Job
    ctx: JobContext
    task: asyncio.Task[Any] | None = None
    lease_deadline: float = 0.0
    """Monotonic time after which this worker stops trusting the lease."""
    stop_reason: StopReason | None = None
    unsaved_progress: bytes | None = None
    force_handle: asyncio.TimerHandle | None = None

    def interrupt(self, reason: StopReason) -> None:
        """Cancel the handler now, remembering why (the executor reads it)."""
        if self.stop_reason is None or reason == "lease_lost":
            self.stop_reason = reason
        self.ctx.mark_cancelled()
        if self.task is not None and not self.task.done():
            self.task.cancel(reason)

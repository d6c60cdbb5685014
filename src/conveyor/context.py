"""What a handler sees while it runs: its job, progress, cancellation, a logger."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Generator
from typing import Any

from conveyor.job import Job

logger = logging.getLogger("conveyor.job")


class _Done:
    """An already-finished awaitable, so ``ctx.progress`` works with and without ``await``."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


_DONE = _Done()


class JobContext:
    """Passed to every handler as its first argument."""

    __slots__ = ("_cancelled", "_on_progress", "job", "logger", "worker_id")

    def __init__(
        self,
        job: Job,
        worker_id: str,
        on_progress: Callable[[Job, dict[str, Any]], None] | None = None,
    ) -> None:
        self.job = job
        self.worker_id = worker_id
        self._on_progress = on_progress
        self._cancelled = False
        self.logger = logging.LoggerAdapter(logger, {"job_id": job.id, "task": job.task})

    @property
    def cancelled(self) -> bool:
        """True once a cancel was requested; finish up and return (or raise)."""
        return self._cancelled

    def progress(self, percent: float | None = None, **fields: Any) -> Awaitable[None]:
        """Report progress: a percent and any JSON fields. Await it in async
        handlers; in sync handlers a plain call is enough."""
        report: dict[str, Any] = dict(fields)
        if percent is not None:
            report["percent"] = percent
        self.job.progress = report
        if self._on_progress is not None:
            self._on_progress(self.job, report)
        return _DONE

"""What a handler sees while it runs: its job, progress, cancellation, a logger."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Sequence
from typing import Any

from conveyor import serialization
from conveyor.job import Job, JobState

logger = logging.getLogger("conveyor.job")

#: How many dependencies ``iter_dependency_results`` reads per backend call.
DEPENDENCY_PAGE_SIZE = 500


class _Done:
    """An already-finished awaitable, so ``ctx.progress`` works with and without ``await``."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


_DONE = _Done()


class JobContext:
    """Passed to every handler as its first argument."""

    __slots__ = ("_cancelled", "_logger", "_on_progress", "_read_jobs", "job", "worker_id")

    def __init__(
        self,
        job: Job,
        worker_id: str,
        on_progress: Callable[[Job, dict[str, Any], bytes], None] | None = None,
        read_jobs: Callable[[Sequence[str]], Awaitable[list[Job]]] | None = None,
    ) -> None:
        self.job = job
        self.worker_id = worker_id
        self._on_progress = on_progress
        self._read_jobs = read_jobs
        self._cancelled = False
        self._logger: logging.LoggerAdapter[logging.Logger] | None = None

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger bound to this job (``job_id`` and ``task`` in every record's extra)."""
        if self._logger is None:  # built on first use: most handlers never log
            self._logger = logging.LoggerAdapter(
                logger, {"job_id": self.job.id, "task": self.job.task}
            )
        return self._logger

    @property
    def cancelled(self) -> bool:
        """True once a cancel was requested; finish up and return (or raise)."""
        return self._cancelled

    def mark_cancelled(self) -> None:
        """Set ``cancelled`` (the worker does, on a cancel, timeout or shutdown)."""
        self._cancelled = True

    async def dependency_results(self) -> list[Any]:
        """The results of the jobs this one depends on (``depends_on``; in a
        chain the step before, in a chord every member of the group), in the
        order they were given. A dependency that failed, was cancelled (policy
        ``run``) or has since been deleted gives ``None``.

        Reads them all in one backend call and holds them all at once; for a
        callback over thousands of results, :meth:`iter_dependency_results`
        reads them a page at a time."""
        wanted = self.job.depends_on
        if not wanted:
            return []
        return await self._results_of(wanted)

    async def iter_dependency_results(
        self, page_size: int = DEPENDENCY_PAGE_SIZE
    ) -> AsyncIterator[Any]:
        """The results of :meth:`dependency_results`, in the same order with the
        same ``None`` rules, read from the store ``page_size`` jobs per call::

            async for result in ctx.iter_dependency_results():
                total += result

        Only one page of jobs is held at a time, so a chord's callback over
        10,000 members keeps memory bounded by the page, not the group."""
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise ValueError(f"page_size must be a positive int, not {page_size!r}")
        wanted = self.job.depends_on
        for start in range(0, len(wanted), page_size):
            for result in await self._results_of(wanted[start : start + page_size]):
                yield result

    async def _results_of(self, wanted: Sequence[str]) -> list[Any]:
        """The results of ``wanted``, in its order, in one backend read."""
        if self._read_jobs is None:
            raise RuntimeError("this JobContext cannot read other jobs (no backend given)")
        found = {job.id: job for job in await self._read_jobs(wanted)}
        return [
            found[job_id].result
            if job_id in found and found[job_id].state is JobState.COMPLETED
            else None
            for job_id in wanted
        ]

    def progress(self, percent: float | None = None, **fields: Any) -> Awaitable[None]:
        """Report progress: a percent and any JSON fields. Await it in async
        handlers; in sync handlers a plain call is enough."""
        report: dict[str, Any] = dict(fields)
        if percent is not None:
            report["percent"] = percent
        encoded = serialization.dumps(report)  # a bad value raises here, in the handler
        self.record_progress(report, encoded)
        return _DONE

    def record_progress(self, report: dict[str, Any], encoded: bytes) -> None:
        """Store a report already encoded (a batch shares one with all its jobs)."""
        self.job.progress = report
        if self._on_progress is not None:
            self._on_progress(self.job, report, encoded)


class BatchContext:
    """Passed to a batch task's handler (``fn(ctx, jobs)``) as its first argument."""

    __slots__ = ("_contexts", "_interrupted", "_logger", "jobs", "worker_id")

    def __init__(self, contexts: list[JobContext], worker_id: str) -> None:
        #: The batch's jobs, in the order the handler's outcomes must follow.
        self.jobs: list[Job] = [ctx.job for ctx in contexts]
        self.worker_id = worker_id
        self._contexts = contexts
        self._interrupted = False
        self._logger: logging.LoggerAdapter[logging.Logger] | None = None

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger bound to this batch (``task`` and ``job_ids`` in every record's extra)."""
        if self._logger is None:
            self._logger = logging.LoggerAdapter(
                logger,
                {"task": self.jobs[0].task, "job_ids": [job.id for job in self.jobs]},
            )
        return self._logger

    @property
    def cancelled(self) -> bool:
        """True when every job of the batch was cancelled, or the batch must stop
        (its timeout, the worker's shutdown): finish up and return (or raise)."""
        return self._interrupted or all(ctx.cancelled for ctx in self._contexts)

    @property
    def cancelled_ids(self) -> set[str]:
        """Ids of the batch's jobs that were cancelled (or whose lease was lost):
        their outcome is ``cancelled`` whatever the handler returns for them."""
        return {ctx.job.id for ctx in self._contexts if ctx.cancelled}

    def mark_cancelled(self) -> None:
        """Set ``cancelled`` for the whole batch (the worker does, on a timeout or shutdown)."""
        self._interrupted = True

    def progress(self, percent: float | None = None, **fields: Any) -> Awaitable[None]:
        """Report progress for the batch: every job of it stores the same report."""
        report: dict[str, Any] = dict(fields)
        if percent is not None:
            report["percent"] = percent
        encoded = serialization.dumps(report)  # a bad value raises here, in the handler
        for ctx in self._contexts:
            ctx.record_progress(report, encoded)
        return _DONE

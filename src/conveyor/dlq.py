"""The dead-letter queue: every job that ended ``failed``."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from conveyor.durations import parse_duration
from conveyor.errors import JobNotFound
from conveyor.filters import job_filter
from conveyor.ids import new_id
from conveyor.job import FailureReason, Job, JobState

if TYPE_CHECKING:
    from conveyor.runtime import Runtime


class DeadLetters:
    """``app.dlq``: list, count, retry, delete and purge failed jobs."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def list(
        self,
        task: str | None = None,
        queue: str | None = None,
        tenant: str | None = None,
        reason: FailureReason | str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Job]:
        backend = await self._runtime.connect()
        where = job_filter(JobState.FAILED, task=task, queue=queue, tenant=tenant, reason=reason)
        return self._runtime.bind_all(await backend.list_jobs(where, limit, offset))

    async def count(
        self,
        task: str | None = None,
        queue: str | None = None,
        tenant: str | None = None,
        reason: FailureReason | str | None = None,
    ) -> int:
        backend = await self._runtime.connect()
        where = job_filter(JobState.FAILED, task=task, queue=queue, tenant=tenant, reason=reason)
        return await backend.count_jobs(where)

    async def retry(self, job_id: str) -> Job:
        """Enqueue a fresh copy (new id, attempts from zero); the original gets ``retried_as``.

        Once per dead letter: retrying one that was retried before creates nothing
        and returns the job it was retried as, with ``duplicate=True`` (so a retry
        clicked twice never runs the work twice). Raises ``InvalidStateError``
        when that job has since been deleted, or the job is not ``failed``.

        A retry also forgets the failures the task's circuit has counted while
        it is closed (an open circuit stays open until it closes or is reset).

        In a workflow the copy takes the failed step's place: the jobs cancelled
        ``dependency_failed`` because of it wait again, on the copy (see
        docs/how-to/workflows.md)."""
        backend = await self._runtime.connect()
        job = (await backend.retry_failed(job_id, new_id())).bind(self._runtime)
        if not job.duplicate:
            # The operator acted on the failures: the retry starts the task's
            # count of consecutive failures afresh (an open circuit stays open).
            await backend.clear_circuit_failures(job.task)
            self._runtime.local_workers.wake()
        return job

    async def delete(self, job_id: str) -> None:
        backend = await self._runtime.connect()
        job = await backend.get_job(job_id)
        if job is None or job.state is not JobState.FAILED:
            raise JobNotFound(job_id)
        await backend.delete_jobs([job_id])

    async def purge(
        self,
        task: str | None = None,
        queue: str | None = None,
        tenant: str | None = None,
        reason: FailureReason | str | None = None,
        older_than: float | str | timedelta | datetime | None = None,
    ) -> int:
        """Delete dead letters matching every given filter; returns how many.

        ``older_than``: an age (``"7d"``, seconds, a timedelta) or a datetime.
        Purging forgets the failures counted by the closed circuit of ``task``
        (of every task when no task is given).
        """
        backend = await self._runtime.connect()
        before: float | None = None
        if isinstance(older_than, datetime):
            before = older_than.timestamp()
        elif older_than is not None:
            before = await backend.now() - parse_duration(older_than)
        where = job_filter(
            JobState.FAILED,
            task=task,
            queue=queue,
            tenant=tenant,
            reason=reason,
            finished_before=before,
        )
        purged = await backend.purge_jobs(where)
        if purged:
            await backend.clear_circuit_failures(task)  # every task's when no task is given
        return purged

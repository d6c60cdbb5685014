"""A conveyor :class:`~conveyor.job.Job` seen as a Django ``TaskResult``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

from conveyor.contrib.django.compat import (
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
)
from conveyor.job import ErrorInfo, Job, JobState

#: The one conveyor task that runs every Django task, named in the payload.
TASK_NAME = "django.task"

_STATUS = {
    JobState.BLOCKED: TaskResultStatus.READY,
    JobState.WAITING: TaskResultStatus.READY,
    # A retry waiting for its backoff is "ready to be executed again".
    JobState.DELAYED: TaskResultStatus.READY,
    JobState.ACTIVE: TaskResultStatus.RUNNING,
    JobState.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobState.FAILED: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}


def to_datetime(seconds: float | None) -> datetime | None:
    """POSIX seconds as Django expects them: aware (UTC) with USE_TZ, else naive local."""
    if seconds is None:
        return None
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment if settings.USE_TZ else timezone.make_naive(moment)


def to_timestamp(moment: datetime) -> datetime:
    """``run_after`` for conveyor: aware (a naive one is in Django's current time zone)."""
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment)


def task_of(job: Job) -> Task:
    """The Django task a job runs, with the queue, priority and run_after it was sent with."""
    path = job.payload.get("task") if isinstance(job.payload, dict) else None
    if job.task != TASK_NAME or not isinstance(path, str):
        raise TaskResultDoesNotExist(job.id)
    task = import_string(path)
    changes: dict[str, Any] = {"priority": job.priority, "queue_name": job.queue}
    if job.payload.get("deferred"):
        changes["run_after"] = to_datetime(job.run_at)
    return task.using(**changes)


def exception_class_path(error: ErrorInfo) -> str:
    """``module.Class`` of the error, for ``TaskError.exception_class``.

    conveyor stores the class's ``__qualname__``; a traceback's last line names
    the class with its module (bare for builtins), so that line is read first."""
    lines = error.traceback.rstrip().splitlines()
    last = lines[-1] if lines else ""
    named = last.split(":", 1)[0].strip()
    if named and " " not in named and named.rsplit(".", 1)[-1] == error.type.rsplit(".", 1)[-1]:
        return named if "." in named else f"builtins.{named}"
    return f"builtins.{error.type}"


def to_result(job: Job, task: Task, alias: str, status: Any = None) -> TaskResult:
    """The TaskResult of ``job``; ``status`` replaces the stored one (the worker's RUNNING)."""
    payload = job.payload
    started = to_datetime(job.started_at)
    # conveyor keeps the worker of the latest attempt: one entry per attempt so
    # that ``attempts`` (their count) is right.
    worker_ids = [job.worker_id or ""] * job.attempts
    result = TaskResult(
        task=task,
        id=job.id,
        status=status or _STATUS[job.state],
        enqueued_at=to_datetime(job.created_at),
        started_at=started,
        finished_at=to_datetime(job.finished_at),
        last_attempted_at=started,
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=alias,
        errors=[
            TaskError(exception_class_path=exception_class_path(e), traceback=e.traceback)
            for e in job.errors
        ],
        worker_ids=worker_ids,
    )
    if job.state is JobState.COMPLETED:
        object.__setattr__(result, "_return_value", job.result)  # frozen dataclass
    return result

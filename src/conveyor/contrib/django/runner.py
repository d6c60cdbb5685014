"""The worker side: the ``django.task`` handler that imports a Django task by its
module path and runs it, with Django's per-thread database connections looked
after as a request would."""

from __future__ import annotations

from typing import Any

from django.db import close_old_connections

from conveyor.context import JobContext
from conveyor.contrib.django.compat import (
    TaskContext,
    TaskError,
    TaskResultStatus,
    task_finished,
    task_started,
)
from conveyor.contrib.django.results import task_of, to_result


def run_django_task(
    ctx: JobContext, task: str, args: list[Any], kwargs: dict[str, Any], **_: Any
) -> Any:
    """Run the Django task named ``task`` (a sync handler: conveyor's thread pool)."""
    from conveyor.contrib.django.backend import ConveyorBackend

    django_task = task_of(ctx.job)
    result = to_result(ctx.job, django_task, django_task.backend, TaskResultStatus.RUNNING)
    task_started.send(ConveyorBackend, task_result=result)
    close_old_connections()  # a connection past CONN_MAX_AGE or broken: a fresh one
    try:
        if django_task.takes_context:
            value = django_task.call(TaskContext(task_result=result), *args, **kwargs)
        else:
            value = django_task.call(*args, **kwargs)
    except BaseException as exc:
        _finish(result, TaskResultStatus.FAILED, exc)
        raise
    finally:
        close_old_connections()
    _finish(result, TaskResultStatus.SUCCESSFUL)
    return value


def _finish(result: Any, status: Any, exc: BaseException | None = None) -> None:
    from conveyor.contrib.django.backend import ConveyorBackend

    if exc is not None:
        import traceback

        cls = type(exc)
        result.errors.append(
            TaskError(
                exception_class_path=f"{cls.__module__}.{cls.__qualname__}",
                traceback="".join(traceback.format_exception(exc)),
            )
        )
    object.__setattr__(result, "status", status)  # frozen dataclass
    task_finished.send(ConveyorBackend, task_result=result)

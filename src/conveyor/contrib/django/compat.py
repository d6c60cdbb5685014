"""The Tasks framework in use: Django's own ``django.tasks`` (Django >= 6.0), else
its backport ``django_tasks`` (Django 4.2-5.2). Both have the same API; one
backend class serves either."""

from __future__ import annotations

from typing import Any

try:
    from django.tasks import (
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task_backends,
    )
    from django.tasks.backends.base import (
        BaseTaskBackend,
    )
    from django.tasks.base import TaskError
    from django.tasks.exceptions import (
        TaskResultDoesNotExist,
    )
    from django.tasks.signals import (
        task_enqueued,
        task_finished,
        task_started,
    )

    FRAMEWORK = "django.tasks"
except ImportError:
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import TaskError
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

    FRAMEWORK = "django_tasks"

Task = Any  # a framework Task: typed loosely, the two frameworks are separate classes

__all__ = [
    "FRAMEWORK",
    "BaseTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]

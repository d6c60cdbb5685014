"""``ConveyorBackend``: Django's Tasks API (``django.tasks`` or the ``django_tasks``
backport) on a conveyor store.

    TASKS = {
        "default": {
            "BACKEND": "conveyor.contrib.django.ConveyorBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"url": "postgresql://...", "attempts": 3, "timeout": 300},
        }
    }

Every Django task is stored as a job of one conveyor task, ``django.task``,
whose payload names the task's module path; ``conveyor worker
conveyor.contrib.django.worker:app`` runs them (see that module).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from conveyor.app import Conveyor
from conveyor.contrib.django.compat import (
    BaseTaskBackend,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    task_enqueued,
)
from conveyor.contrib.django.results import TASK_NAME, task_of, to_result, to_timestamp
from conveyor.runtime import Runtime
from conveyor.worker.worker import Worker

#: OPTIONS keys that set the ``django.task`` conveyor task's defaults.
TASK_OPTIONS = ("attempts", "timeout", "backoff", "rate_limit", "concurrency", "ttl")


class DjangoConveyor(Conveyor):
    """The app behind one or more Conveyor backends: its workers listen on the
    backends' ``QUEUES`` unless told otherwise."""

    def __init__(self, url: str | None, **overrides: Any) -> None:
        super().__init__(url, **overrides)
        self.django_queues: list[str] = []

    def worker(self, **options: Any) -> Worker:
        if not options.get("queues"):
            options["queues"] = self.django_queues or None
        return super().worker(**options)


_apps: dict[str, DjangoConveyor] = {}
_apps_lock = threading.Lock()


def shared_app(options: dict[str, Any], queues: Iterable[str]) -> DjangoConveyor:
    """One app per distinct OPTIONS: Django builds a backend per thread, and
    each would otherwise open its own connections and event loop thread."""
    key = json.dumps(options, sort_keys=True, default=str)
    with _apps_lock:
        app = _apps.get(key)
        if app is None:
            settings = dict(options.get("settings", {}))
            app = DjangoConveyor(options.get("url"), **settings)
            from conveyor.contrib.django.runner import run_django_task

            defaults = {name: options[name] for name in TASK_OPTIONS if name in options}
            app.task(TASK_NAME, **defaults)(run_django_task)
            _apps[key] = app
        app.django_queues = sorted({*app.django_queues, *queues})
        return app


class ConveyorBackend(BaseTaskBackend):  # type: ignore[misc]  # Django is untyped
    """Django Tasks on conveyor: priority, queues, ``run_after``, results
    (``get_result`` from any process), async tasks and the task context."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.app = shared_app(dict(self.options), self.queues)

    @property
    def runtime(self) -> Runtime:
        return self.app.runtime

    def enqueue(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
        self.validate_task(task)
        payload: dict[str, Any] = {"task": task.module_path, "args": list(args), "kwargs": kwargs}
        options: dict[str, Any] = {"queue": task.queue_name, "priority": task.priority}
        if task.run_after is not None:
            options["run_at"] = to_timestamp(task.run_after)
            payload["deferred"] = True  # so the result reports its run_after back
        job = self.app.enqueue_sync(TASK_NAME, payload, **options)
        result = to_result(job, task, self.alias)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        job = self.runtime.call_sync(lambda runtime: runtime.get_job(result_id))
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        return to_result(job, task_of(job), self.alias)

"""Django's Tasks API on conveyor, through a real Django project (tests/django_project):
tasks enqueued with ``.enqueue()``, run by ``app.drain`` or by a ``conveyor worker``
subprocess, read back with ``get_result``; on SQLite and PostgreSQL stores."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import django
import pytest

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_project.settings")
django.setup()

from django.db import transaction  # noqa: E402  # after django.setup()
from django.test import override_settings  # noqa: E402

from conveyor.contrib.django import ConveyorBackend  # noqa: E402
from conveyor.contrib.django.compat import (  # noqa: E402
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
)
from conveyor.filters import job_filter  # noqa: E402
from conveyor.job import Job, JobState  # noqa: E402
from conveyor.runtime import Runtime  # noqa: E402
from django_project.settings import conveyor_tasks  # noqa: E402
from django_project.shop.tasks import (  # noqa: E402
    OutOfStock,
    add,
    double,
    reserve,
    send_receipt,
    whoami,
)
from support.kits import KITS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    kit = KITS[request.param](tmp_path)
    yield kit.url()
    asyncio.run(kit.cleanup())


@pytest.fixture
def tasks_backend(store_url: str) -> Iterator[ConveyorBackend]:
    """TASKS pointed at this test's store; the backend's app closed afterwards."""
    with override_settings(TASKS=conveyor_tasks(store_url)):
        backend = task_backends["default"]
        assert isinstance(backend, ConveyorBackend)
        yield backend
        asyncio.run(backend.app.close())


def drain(backend: ConveyorBackend, **options: Any) -> int:
    """Run every due job in this process, as a test would with ``app.drain``."""

    async def run() -> int:
        try:
            return await backend.app.drain(**options)
        finally:
            await backend.app.close()

    return asyncio.run(run())


def stored_jobs(backend: ConveyorBackend) -> list[Job]:
    async def read(runtime: Runtime) -> list[Job]:
        store = await runtime.connect()
        return await store.list_jobs(job_filter(None), 100, 0)

    return backend.runtime.call_sync(read)


def test_enqueue_runs_and_get_result_reads_the_return_value(
    tasks_backend: ConveyorBackend,
) -> None:
    result = add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert result.args == [2, 3]
    assert result.backend == "default"
    assert isinstance(result.enqueued_at, datetime)
    assert result.enqueued_at.tzinfo is not None  # USE_TZ: aware
    assert add.get_result(result.id).status == TaskResultStatus.READY

    assert drain(tasks_backend) == 1

    done = add.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 5
    assert done.attempts == 1
    assert done.errors == []
    assert done.started_at is not None
    assert done.finished_at is not None
    assert done.started_at <= done.finished_at
    result.refresh()  # the handle the caller kept reads the outcome too
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5


def test_queue_priority_and_run_after_reach_the_store(tasks_backend: ConveyorBackend) -> None:
    receipt = send_receipt.enqueue({"email": "a@example.com", "total": 12})
    later = add.using(run_after=datetime.now(UTC) + timedelta(hours=1)).enqueue(1, 1)
    low = add.using(priority=-5).enqueue(0, 1)
    high = add.using(priority=50).enqueue(0, 2)

    jobs = {job.id: job for job in stored_jobs(tasks_backend)}
    assert (jobs[receipt.id].queue, jobs[receipt.id].priority) == ("emails", 10)
    assert jobs[later.id].state is JobState.DELAYED
    assert jobs[later.id].run_at > time.time() + 3500
    assert (jobs[low.id].priority, jobs[high.id].priority) == (-5, 50)
    deferred = add.get_result(later.id)
    assert deferred.task.run_after is not None
    assert abs(deferred.task.run_after - later.task.run_after) < timedelta(seconds=1)
    assert send_receipt.get_result(receipt.id).task.queue_name == "emails"

    # One slot: the higher priority runs first; the deferred task does not run yet.
    assert drain(tasks_backend, concurrency=1) == 3
    assert add.get_result(high.id).started_at <= add.get_result(low.id).started_at
    assert add.get_result(later.id).status == TaskResultStatus.READY
    assert send_receipt.get_result(receipt.id).return_value == {
        "sent_to": "a@example.com",
        "total": 12,
    }


def test_context_async_tasks_and_failures(tasks_backend: ConveyorBackend) -> None:
    who = whoami.enqueue("t-1")
    doubled = double.enqueue(21)
    failed = reserve.enqueue("sku-9")
    assert drain(tasks_backend) == 3

    assert whoami.get_result(who.id).return_value == {"id": who.id, "attempt": 1, "tag": "t-1"}
    assert double.get_result(doubled.id).return_value == 42
    outcome = reserve.get_result(failed.id)
    assert outcome.status == TaskResultStatus.FAILED
    [error] = outcome.errors
    assert error.exception_class_path == "django_project.shop.tasks.OutOfStock"
    assert error.exception_class is OutOfStock
    assert "no sku-9 left" in error.traceback
    with pytest.raises(ValueError, match="failed"):
        _ = outcome.return_value


def test_aenqueue_and_aget_result_from_async_code(tasks_backend: ConveyorBackend) -> None:
    async def view() -> str:
        result = await double.aenqueue(4)
        assert (await double.aget_result(result.id)).status == TaskResultStatus.READY
        return str(result.id)

    result_id = asyncio.run(view())
    assert drain(tasks_backend) == 1

    async def read() -> Any:
        return (await double.aget_result(result_id)).return_value

    assert asyncio.run(read()) == 8


def test_unknown_and_mismatched_results(tasks_backend: ConveyorBackend) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        add.get_result("01J00000000000000000000000")
    result = add.enqueue(1, 2)
    with pytest.raises(Exception, match="Task does not match"):
        double.get_result(result.id)


def test_enqueue_on_commit_goes_through_djangos_transaction(
    tasks_backend: ConveyorBackend,
) -> None:
    class Rollback(Exception):
        pass

    def rolled_back() -> None:
        with transaction.atomic():
            transaction.on_commit(partial(add.enqueue, 1, 1))
            raise Rollback

    with pytest.raises(Rollback):
        rolled_back()
    assert stored_jobs(tasks_backend) == []

    with transaction.atomic():
        transaction.on_commit(partial(add.enqueue, 2, 2))
        assert stored_jobs(tasks_backend) == []  # not before the commit
    [job] = stored_jobs(tasks_backend)
    assert job.payload["args"] == [2, 2]


# -- a real `conveyor worker` process ----------------------------------------------


def wait_for(check: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {check}")
        time.sleep(0.1)


@pytest.mark.slow
def test_tasks_run_on_a_conveyor_worker_process(
    tasks_backend: ConveyorBackend, store_url: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env |= {
        "CONVEYOR_URL": store_url,
        "DJANGO_SETTINGS_MODULE": "django_project.settings",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
    }
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "conveyor", "worker", "conveyor.contrib.django.worker:app"],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        summed = add.enqueue(20, 22)
        receipt = send_receipt.enqueue({"email": "b@example.com", "total": 3})
        who = whoami.enqueue("w")
        failed = reserve.enqueue("sku-1")

        def finished() -> bool:
            return all(
                task.get_result(result.id).is_finished
                for task, result in [
                    (add, summed),
                    (send_receipt, receipt),
                    (whoami, who),
                    (reserve, failed),
                ]
            )

        try:
            wait_for(finished)
        except AssertionError:
            raise AssertionError(log.read_text()) from None
        assert add.get_result(summed.id).return_value == 42
        # QUEUES ["default", "emails"]: the worker listens on both by default.
        assert send_receipt.get_result(receipt.id).return_value["sent_to"] == "b@example.com"
        context = whoami.get_result(who.id)
        assert context.return_value == {"id": who.id, "attempt": 1, "tag": "w"}
        assert context.worker_ids[0]  # the worker that ran it
        outcome = reserve.get_result(failed.id)
        assert outcome.status == TaskResultStatus.FAILED
        assert outcome.errors[0].exception_class is OutOfStock
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()

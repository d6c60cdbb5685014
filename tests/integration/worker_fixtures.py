"""Shared helpers for the in-process worker tests (``test_worker_*.py``).

Not a conftest on purpose: other integration suites live beside these. The
``stack`` fixture (conftest.py) builds one :class:`Stack` per selected backend;
backends and their fresh stores come from ``support.kits``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conveyor.app import Conveyor
from conveyor.job import Job
from conveyor.worker.worker import Worker
from support.kits import KITS, UrlKit

#: Small settings so that stalls, polls and grace periods take moments. Not the
#: lease: a host pause longer than a short one makes the worker cancel its own
#: job. Tests about leases (renewal, loss, stall recovery) set a short one.
FAST: dict[str, Any] = {
    "lease": "30s",
    "stall_interval": "0.2s",
    "poll_interval": "0.05s",
    "heartbeat_interval": "0.5s",
    "cancel_grace": "0.3s",
    "shutdown_timeout": "5s",
    "backoff_base": 0.05,
    "backoff_max": 0.2,
    "default_timeout": "20s",
    "cleanup_interval": "30s",
    "circuit_threshold": 0,
}


@dataclass
class Stack:
    """One test's backend: how to build apps on one fresh store, and clean up."""

    name: str
    tmp_path: Path
    apps: list[Conveyor] = field(default_factory=list)
    kit: UrlKit = field(init=False)

    def __post_init__(self) -> None:
        self.kit = KITS[self.name](self.tmp_path)

    @property
    def url(self) -> str:
        return self.kit.shared_url()

    def app(self, **overrides: Any) -> Conveyor:
        """A new app on this test's store, with :data:`FAST` settings."""
        app = Conveyor(self.url, **{**FAST, **self.kit.app_settings(), **overrides})
        self.kit.attach(app)
        self.apps.append(app)
        return app

    async def corrupt_payload(self, app: Conveyor, job_id: str) -> None:
        await self.kit.corrupt_payload(await app.connect(), job_id)

    async def close(self) -> None:
        for app in reversed(self.apps):
            await app.close()
        await self.kit.cleanup()


@contextlib.asynccontextmanager
async def open_stack(name: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """A :class:`Stack` for one test; every app it built is closed afterwards."""
    built = Stack(name, tmp_path)
    try:
        yield built
    finally:
        await built.close()


# -- running a worker ---------------------------------------------------------


@contextlib.asynccontextmanager
async def running(app: Conveyor, **options: Any) -> AsyncIterator[Worker]:
    """Run a worker as a task for the block; stop it (gracefully) at the end."""
    options.setdefault("install_signals", False)
    worker = app.worker(**options)
    started = asyncio.Event()

    def on_started(event: str, worker_id: str) -> None:
        if worker_id == worker.id:
            started.set()

    app.on("worker_started", on_started)
    task = asyncio.create_task(worker.run(), name=f"test worker {worker.id}")
    try:
        done, _ = await asyncio.wait(
            {task, asyncio.ensure_future(started.wait())},
            timeout=10,
            return_when=asyncio.FIRST_COMPLETED,
        )
        if task in done:
            task.result()  # surface why it died
        assert started.is_set(), "the worker did not start"
        yield worker
    finally:
        app.events.off("worker_started", on_started)
        worker.stop()
        await asyncio.wait_for(task, 30)


async def settled(job: Job, timeout: float = 15) -> Job:
    """The job once it is terminal (fails the test after ``timeout``)."""
    app = job._source  # the runtime the job was read from
    assert app is not None
    return await app.wait_for_job(job.id, timeout=timeout)


async def eventually(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool],
    timeout: float = 10,
    message: str = "condition",
) -> None:
    """Poll ``check`` until true; a failing wait names the condition."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        outcome = check()
        if asyncio.iscoroutine(outcome):
            outcome = await outcome
        if outcome:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        await asyncio.sleep(0.01)


class Recorder:
    """Records events (name, data) in order, and lets a test wait for one."""

    def __init__(self, app: Conveyor, *names: str) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._changed = asyncio.Event()
        for name in names:
            app.on(name, self._record)

    def _record(self, event: str, **data: Any) -> None:
        self.events.append((event, data))
        self._changed.set()

    def names(self, job_id: str | None = None) -> list[str]:
        return [
            name
            for name, data in self.events
            if job_id is None or (data.get("job") is not None and data["job"].id == job_id)
        ]

    def of(self, name: str) -> list[dict[str, Any]]:
        return [data for event, data in self.events if event == name]

    async def wait_for(
        self,
        name: str,
        predicate: Callable[[dict[str, Any]], bool] = lambda data: True,
        timeout: float = 10,
        count: int = 1,
    ) -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            found = [data for data in self.of(name) if predicate(data)]
            if len(found) >= count:
                return found
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"no {count} {name!r} event(s) within {timeout}s: {found}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)


@contextlib.contextmanager
def released(*gates: threading.Event) -> Iterator[None]:
    """Set ``gates`` (that sync handlers block on) when the block ends, even on
    failure, so that no abandoned thread outlives the test for long."""
    try:
        yield
    finally:
        for gate in gates:
            gate.set()

"""The seam between the app and its roles: what they share, and nothing else.

``Conveyor`` is the facade users hold: it registers tasks, queues and schedules
and offers the admin reads. The roles (worker, executor, stall reaper,
retention cleaner, scheduler, dead letters, the sync portal) get a
:class:`Runtime`: the settings, the event bus, the task registry, the backend,
the producer path (``enqueue``) and the workers running in this process. None
of them imports the app.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from conveyor.backends.base import (
    Backend,
    NewJob,
    QueueInfo,
    ScheduleSpec,
    TransactionalEnqueue,
)
from conveyor.backends.registry import backend_from_url
from conveyor.errors import ConfigurationError, JobNotFound
from conveyor.events import EventBus
from conveyor.ids import new_ids
from conveyor.producer import JobBuilder, check_debounced_keys
from conveyor.retry import Backoff
from conveyor.tracing import ProducerTracing, producer_tracing

if TYPE_CHECKING:
    from conveyor.job import Job
    from conveyor.portal import Portal
    from conveyor.settings import Settings
    from conveyor.task import Task

T = TypeVar("T")

#: What ``enqueue_many`` takes: (task, payload) or (task, payload, options).
EnqueueItem = tuple[str, Any] | tuple[str, Any, Mapping[str, Any]]


class LocalWorker(Protocol):
    """What the app asks of a worker running in this process."""

    def wake(self) -> None: ...

    def request_cancel(self, job_id: str) -> None: ...


class LocalWorkers:
    """The workers of one app running in this process. A local enqueue, resume or
    dead-letter retry wakes them; a cancel reaches the one running the job."""

    def __init__(self) -> None:
        self._workers: list[LocalWorker] = []

    def attach(self, worker: LocalWorker) -> None:
        self._workers.append(worker)

    def detach(self, worker: LocalWorker) -> None:
        self._workers.remove(worker)

    def wake(self) -> None:
        for worker in self._workers:
            worker.wake()

    def request_cancel(self, job_id: str) -> None:
        for worker in self._workers:
            worker.request_cancel(job_id)

    def __iter__(self) -> Iterator[LocalWorker]:
        return iter(list(self._workers))

    def __len__(self) -> int:
        return len(self._workers)


class Runtime:
    """One app's shared state for its roles: settings, events, tasks, queues,
    schedules, the backend (opened once, on the loop that first connects) and
    the local workers."""

    def __init__(
        self,
        settings: Settings,
        *,
        tasks: dict[str, Task] | None = None,
        queues: dict[str, QueueInfo] | None = None,
        schedules: dict[str, ScheduleSpec] | None = None,
        builder: JobBuilder | None = None,
    ) -> None:
        self.settings = settings
        self.events = EventBus()
        self.local_workers = LocalWorkers()
        # Registries the app fills at import time; a twin shares them.
        self.tasks: dict[str, Task] = {} if tasks is None else tasks
        self.queues: dict[str, QueueInfo] = {} if queues is None else queues
        self.schedules: dict[str, ScheduleSpec] = {} if schedules is None else schedules
        self.builder = builder or JobBuilder(settings, self.tasks)
        self._backend: Backend | None = None
        self._opened = False
        self._open_lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._portal: Portal | None = None
        # Decided when the backend opens (app start), not per enqueue.
        self._tracing: ProducerTracing | None = None

    def twin(self) -> Runtime:
        """A runtime with these settings, tasks, queues and schedules for another
        event loop (a backend is bound to the loop that opened it)."""
        return Runtime(
            self.settings,
            tasks=self.tasks,
            queues=self.queues,
            schedules=self.schedules,
            builder=self.builder,
        )

    # -- the backend ----------------------------------------------------------
    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = backend_from_url(self.settings.url, self.settings)
        return self._backend

    @property
    def opened(self) -> bool:
        return self._opened

    async def connect(self) -> Backend:
        """Open the backend (once) and store the declared queue options."""
        if self._opened:
            return self.backend
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if not self._opened:
                backend = self.backend
                await backend.open()
                for info in self.queues.values():
                    await backend.configure_queue(info)
                self._loop = asyncio.get_running_loop()
                self._tracing = producer_tracing()
                self._opened = True
        return self.backend

    async def close(self) -> None:
        if self._backend is not None and self._opened:
            await self._backend.close()
        self._opened = False
        self._backend = None
        self._open_lock = None
        self._loop = None
        if self._portal is not None:
            self._portal.close()
            self._portal = None

    def backoff_for(self, task: Task | None) -> Backoff:
        """The task's backoff, else the one the settings describe."""
        if task and task.options.backoff:
            return task.options.backoff
        s = self.settings
        return Backoff.exponential(
            base=s.backoff_base, max=s.backoff_max, multiplier=s.backoff_multiplier
        )

    # -- producing --------------------------------------------------------------
    async def enqueue(
        self, task: str, payload: Any = None, *, connection: Any = None, **options: Any
    ) -> Job:
        return (await self.enqueue_many([(task, payload, options)], connection=connection))[0]

    async def enqueue_many(
        self, items: Iterable[EnqueueItem], *, connection: Any = None
    ) -> list[Job]:
        """Enqueue many jobs in one round trip, atomically (see ``Conveyor.enqueue_many``)."""
        batch = list(items)
        build = self.builder.build
        new_jobs = [
            build(item[0], item[1], item[2] if len(item) > 2 else {}, job_id)
            for item, job_id in zip(batch, new_ids(len(batch)), strict=True)
        ]
        return await self.store_new(new_jobs, connection=connection)

    async def store_new(self, new_jobs: Sequence[NewJob], *, connection: Any = None) -> list[Job]:
        """Store jobs already built (``enqueue_many``, workflow starts) in one call."""
        if not new_jobs:
            return []
        check_debounced_keys(new_jobs)
        backend = await self.connect()
        tracing = self._tracing
        if tracing is None:
            jobs = await self._store_new(backend, new_jobs, connection)
        else:
            spans = tracing.start(new_jobs)
            try:
                jobs = await self._store_new(backend, new_jobs, connection)
            except BaseException as exc:
                tracing.fail(spans, exc)
                raise
            tracing.end(spans, jobs)
        listening = self.events.has("enqueued")
        for job in jobs:
            job.bind(self)
            if listening and not job.duplicate:
                self.events.emit("enqueued", job=job)
        return jobs

    async def _store_new(
        self, backend: Backend, new_jobs: Sequence[NewJob], connection: Any
    ) -> list[Job]:
        if connection is None:
            return await backend.enqueue_jobs(new_jobs)
        if isinstance(backend, TransactionalEnqueue):
            return await backend.enqueue_jobs_on(connection, new_jobs)
        raise ConfigurationError(
            f"connection: enqueue inside your own transaction needs the PostgreSQL "
            f"backend; {type(backend).__name__} ({self.settings.url}) has no "
            f"transactions to join"
        )

    def enqueue_sync(self, task: str, payload: Any = None, **options: Any) -> Job:
        """Enqueue from sync code; safe from any thread."""
        job = self.call_sync(lambda runtime: runtime.enqueue(task, payload, **options))
        return job.bind(self)

    def call_sync(self, fn: Callable[[Runtime], Coroutine[Any, Any, T]]) -> T:
        """Run ``fn(runtime)`` from sync code, from any thread: on this runtime's
        loop when it is live in another thread (its own backend, a private
        memory:// store too, and its events), else on a twin in the portal. It
        runs in the caller's context (the current trace span, for one), as a
        call on this thread would."""
        caller = contextvars.copy_context()

        async def in_caller_context(runtime: Runtime) -> T:
            return await asyncio.get_running_loop().create_task(fn(runtime), context=caller)

        loop = self._loop
        if loop is not None and loop.is_running() and not _runs_on(loop):
            return asyncio.run_coroutine_threadsafe(in_caller_context(self), loop).result()
        if self._portal is None:
            from conveyor.portal import Portal

            self._portal = Portal(self)
        return self._portal.call(in_caller_context)

    # -- jobs ---------------------------------------------------------------------
    async def get_job(self, job_id: str) -> Job | None:
        backend = await self.connect()
        job = await backend.get_job(job_id)
        return job.bind(self) if job is not None else None

    async def wait_for_job(
        self, job_id: str, timeout: float | None = None, poll: float = 0.05
    ) -> Job:
        """Poll until the job is terminal; raises TimeoutError / JobNotFound."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = min(poll, 0.01)
        while True:
            job = await self.get_job(job_id)
            if job is None:
                raise JobNotFound(job_id)
            if job.is_terminal:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {job.state.value} after {timeout}s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, poll)

    def bind_all(self, jobs: Sequence[Job]) -> list[Job]:
        return [job.bind(self) for job in jobs]


def _runs_on(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False

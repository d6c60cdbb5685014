"""``Conveyor``: the app users hold. A thin facade over the backend and the worker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from conveyor.backends.base import (
    Backend,
    JobFilter,
    QueueInfo,
    ScheduleSpec,
    TransactionalEnqueue,
    WorkerInfo,
)
from conveyor.backends.registry import backend_from_url
from conveyor.dlq import DeadLetters
from conveyor.durations import parse_duration
from conveyor.errors import ConfigurationError, JobNotFound, UnknownTask
from conveyor.events import Callback, EventBus
from conveyor.ids import new_ids
from conveyor.job import FailureReason, Job, JobState
from conveyor.producer import JobBuilder
from conveyor.retry import Backoff
from conveyor.scheduler.admin import Schedules
from conveyor.settings import Settings, load_settings
from conveyor.task import FunctionHandler, Handler, Task, build_options

if TYPE_CHECKING:
    from datetime import datetime

    from conveyor.scheduler.scheduler import Scheduler
    from conveyor.worker.worker import Worker

F = TypeVar("F", bound=Callable[..., Any])


class Conveyor:
    """A conveyor app: tasks, settings and one backend.

    ``Conveyor()`` reads ``CONVEYOR_URL`` (default ``sqlite:///./conveyor.db``);
    keyword arguments override any setting (``Conveyor(url, lease="10s")``).
    """

    def __init__(
        self, url: str | None = None, *, settings: Settings | None = None, **overrides: Any
    ):
        self.settings = settings or load_settings(url=url, **overrides)
        self.events = EventBus()
        self.dlq = DeadLetters(self)
        self.schedules = Schedules(self)
        self._schedule_specs: dict[str, ScheduleSpec] = {}
        self._tasks: dict[str, Task] = {}
        self._queues: dict[str, QueueInfo] = {}
        self._backend: Backend | None = None
        self._opened = False
        self._open_lock: asyncio.Lock | None = None
        self._local_workers: list[Worker] = []
        self._portal: Any = None
        self._builder = JobBuilder(self.settings, self._tasks)
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- configuration ------------------------------------------------------
    @property
    def url(self) -> str:
        return self.settings.url

    @property
    def tasks(self) -> Mapping[str, Task]:
        return self._tasks

    def task(self, name: str | None = None, **options: Any) -> Callable[[Callable[..., Any]], Task]:
        """Register ``fn(ctx, **payload)`` as a task. Options: queue, attempts,
        backoff, timeout, priority, rate_limit, concurrency, ttl, keep_completed,
        keep_failed, circuit_threshold, circuit_open_for, retry_on, no_retry_on."""
        task_options = build_options(**options)

        def decorate(fn: Callable[..., Any]) -> Task:
            task_name = name or f"{fn.__module__}.{fn.__qualname__}"
            return self._add(FunctionHandler(task_name, fn, task_options))

        return decorate

    def register(self, handler: Handler) -> Task:
        """Register a :class:`Handler` instance (the class form)."""
        if not handler.name:
            raise ValueError(f"{type(handler).__name__} needs a `name`")
        return self._add(handler)

    def _add(self, handler: Handler) -> Task:
        if handler.name in self._tasks:
            raise ValueError(f"task {handler.name!r} is already registered")
        task = Task(self, handler)
        self._tasks[task.name] = task
        self._builder.forget()
        return task

    def get_task(self, name: str) -> Task:
        try:
            return self._tasks[name]
        except KeyError:
            raise UnknownTask(f"no task named {name!r} is registered") from None

    def on(self, event: str, callback: Callback | None = None) -> Any:
        """Listen to an event: ``app.on("completed", fn)`` or as a decorator."""
        if callback is None:
            return lambda fn: self.events.on(event, fn)
        return self.events.on(event, callback)

    def queue(self, name: str, max_size: int | None = None, ttl: float | str | None = None) -> None:
        """Per-queue options, stored in the backend when the app connects."""
        if max_size is not None and max_size < 1:
            raise ValueError("max_size must be >= 1")
        info = QueueInfo(
            name, max_size=max_size, ttl=parse_duration(ttl) if ttl is not None else None
        )
        self._queues[name] = info
        if self._opened:
            raise RuntimeError("declare queues before the app connects (at import time)")

    def schedule(
        self,
        name: str,
        *,
        cron: str | None = None,
        every: float | str | None = None,
        task: str | Task,
        payload: Any = None,
        timezone: str = "UTC",
        start: datetime | float | None = None,
        end: datetime | float | None = None,
        limit: int | None = None,
        misfire: str = "skip",
        **enqueue_options: Any,
    ) -> ScheduleSpec:
        """Declare a schedule: a 5- or 6-field ``cron`` (seconds first) or an
        interval ``every`` ("30s"), in ``timezone``; see docs/how-to/schedules.md.
        Enqueue options: queue, priority, attempts, timeout, ttl, tenant, metadata.
        Raises :class:`~conveyor.errors.InvalidSchedule` on anything invalid."""
        from conveyor.errors import InvalidSchedule
        from conveyor.scheduler.spec import build_spec

        spec = build_spec(
            name,
            task=task,
            cron=cron,
            every=every,
            payload=payload,
            timezone=timezone,
            start=start,
            end=end,
            limit=limit,
            misfire=misfire,
            options=enqueue_options,
        )
        if name in self._schedule_specs:
            raise InvalidSchedule(f"schedule {name!r} is already declared")
        self._schedule_specs[name] = spec
        return spec

    @property
    def schedule_specs(self) -> Mapping[str, ScheduleSpec]:
        """The schedules this app's code declares, by name."""
        return self._schedule_specs

    def _twin(self) -> Conveyor:
        """A second app with these settings, tasks and queues, for another event loop
        (backends are bound to the loop that opened them)."""
        twin = Conveyor(settings=self.settings)
        twin._tasks, twin._queues, twin._builder = self._tasks, self._queues, self._builder
        twin._schedule_specs = self._schedule_specs
        return twin

    # -- connection -----------------------------------------------------------
    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = backend_from_url(self.url, self.settings)
        return self._backend

    async def connect(self) -> Backend:
        """Open the backend (once) and store declared queue options."""
        if self._opened:
            return self.backend
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if not self._opened:
                backend = self.backend
                await backend.open()
                for info in self._queues.values():
                    await backend.configure_queue(info.name, info.max_size, info.ttl)
                self._loop = asyncio.get_running_loop()
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

    async def __aenter__(self) -> Conveyor:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- enqueue --------------------------------------------------------------
    async def enqueue(
        self, task: str, payload: Any = None, *, connection: Any = None, **options: Any
    ) -> Job:
        """Enqueue one job. Options: delay, run_at, priority, attempts, timeout,
        idempotency_key, tenant, metadata, queue, ttl, worker. ``connection``: see
        :meth:`enqueue_many`."""
        return (await self.enqueue_many([(task, payload, options)], connection=connection))[0]

    async def enqueue_many(
        self,
        items: Iterable[tuple[str, Any] | tuple[str, Any, Mapping[str, Any]]],
        *,
        connection: Any = None,
    ) -> list[Job]:
        """Enqueue many jobs in one round trip, atomically: all or none.

        ``connection``: the caller's own database connection (PostgreSQL: an
        asyncpg connection or a psycopg 3 ``AsyncConnection``) with a
        transaction open; the jobs commit or roll back with it."""
        batch = list(items)
        build = self._builder.build
        new_jobs = [
            build(item[0], item[1], item[2] if len(item) > 2 else {}, job_id)
            for item, job_id in zip(batch, new_ids(len(batch)), strict=True)
        ]
        if not new_jobs:
            return []
        backend = await self.connect()
        if connection is None:
            jobs = await backend.enqueue_jobs(new_jobs)
        elif isinstance(backend, TransactionalEnqueue):
            jobs = await backend.enqueue_jobs_on(connection, new_jobs)
        else:
            raise ConfigurationError(
                f"connection: enqueue inside your own transaction needs the PostgreSQL "
                f"backend; {type(backend).__name__} ({self.url}) has no transactions to join"
            )
        listening = self.events.has("enqueued")
        for job in jobs:
            job._app = self
            if listening and not job.duplicate:
                self.events.emit("enqueued", job=job)
        return jobs

    def enqueue_sync(self, task: str, payload: Any = None, **options: Any) -> Job:
        """Enqueue from sync code (Django, Flask, scripts); safe from any thread."""
        from conveyor.portal import Portal

        loop = self._loop
        if loop is not None and loop.is_running() and not _runs_on(loop):
            # The app is live on a loop in another thread: enqueue through it, into
            # its own backend (a private memory:// store too), with its events.
            return asyncio.run_coroutine_threadsafe(
                self.enqueue(task, payload, **options), loop
            ).result()
        if self._portal is None:
            self._portal = Portal(self)
        job: Job = self._portal.call(lambda app: app.enqueue(task, payload, **options))
        job._app = self
        return job

    # -- reading and acting ------------------------------------------------------
    def _bind(self, job: Job | None) -> Job | None:
        if job is not None:
            job._app = self
        return job

    async def get_job(self, job_id: str) -> Job | None:
        backend = await self.connect()
        return self._bind(await backend.get_job(job_id))

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

    async def list_jobs(
        self,
        state: JobState | str | Sequence[JobState | str] | None = None,
        *,
        queue: str | None = None,
        task: str | None = None,
        tenant: str | None = None,
        reason: FailureReason | str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Job]:
        backend = await self.connect()
        jobs = await backend.list_jobs(
            job_filter(state, queue=queue, task=task, tenant=tenant, reason=reason), limit, offset
        )
        return [job for job in jobs if self._bind(job)]

    async def count_jobs(
        self,
        state: JobState | str | Sequence[JobState | str] | None = None,
        *,
        queue: str | None = None,
        task: str | None = None,
        tenant: str | None = None,
        reason: FailureReason | str | None = None,
    ) -> int:
        backend = await self.connect()
        return await backend.count_jobs(
            job_filter(state, queue=queue, task=task, tenant=tenant, reason=reason)
        )

    async def cancel(self, job_id: str) -> Job:
        """Cancel: waiting/delayed at once; active jobs are signalled and end ``cancelled``."""
        backend = await self.connect()
        job = await backend.cancel_job(job_id)
        if job is None:
            raise JobNotFound(job_id)
        if job.state is JobState.CANCELLED:
            self.events.emit("cancelled", job=job)
        elif job.state is JobState.ACTIVE:
            for worker in self._local_workers:
                worker.request_cancel(job_id)
        return job

    async def stats(self) -> dict[str, dict[str, int]]:
        """``{queue: {waiting, delayed, active, completed, failed, cancelled}}``."""
        backend = await self.connect()
        return await backend.queue_counts()

    async def queues(self) -> list[QueueInfo]:
        backend = await self.connect()
        return await backend.list_queues()

    async def pause_queue(self, name: str) -> None:
        backend = await self.connect()
        await backend.set_queue_paused(name, True)

    async def resume_queue(self, name: str) -> None:
        backend = await self.connect()
        await backend.set_queue_paused(name, False)
        for worker in self._local_workers:
            worker.wake()

    async def workers(self) -> list[tuple[WorkerInfo, bool]]:
        """Workers from heartbeats, each with whether it is alive: seen within 3 of
        its own heartbeat intervals."""
        backend = await self.connect()
        now = await backend.now()
        return [
            (w, now - w.last_seen < 3 * w.heartbeat_interval) for w in await backend.list_workers()
        ]

    async def circuits(self) -> list[Any]:
        backend = await self.connect()
        return await backend.list_circuits()

    async def reset_circuit(self, task: str) -> None:
        backend = await self.connect()
        await backend.reset_circuit(task)

    # -- running -------------------------------------------------------------------
    def worker(self, **options: Any) -> Worker:
        """A worker for this app (``queues``, ``concurrency``, ``burst``, ...)."""
        from conveyor.worker.worker import Worker

        return Worker(self, **options)

    def scheduler(self, **options: Any) -> Scheduler:
        """A scheduler for this app's schedules (``max_sleep``, ``misfire_grace``,
        ``install_signals``); ``await scheduler.run()`` until ``scheduler.stop()``."""
        from conveyor.scheduler.scheduler import Scheduler

        return Scheduler(self, **options)

    async def drain(
        self, queues: Sequence[str] | None = None, concurrency: int | None = None
    ) -> int:
        """Run every due job in this process until none is left; returns how many ran.

        For tests: delayed jobs not yet due are left alone.
        """
        worker = self.worker(
            queues=queues, concurrency=concurrency, burst=True, install_signals=False
        )
        await worker.run()
        return worker.processed

    def backoff_for(self, task: Task | None) -> Backoff:
        if task and task.options.backoff:
            return task.options.backoff
        s = self.settings
        return Backoff.exponential(
            base=s.backoff_base, max=s.backoff_max, multiplier=s.backoff_multiplier
        )


def _runs_on(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def job_filter(
    state: JobState | str | Sequence[JobState | str] | None = None,
    *,
    queue: str | None = None,
    task: str | None = None,
    tenant: str | None = None,
    reason: FailureReason | str | None = None,
    finished_before: float | None = None,
) -> JobFilter:
    states: list[JobState] | None
    if state is None:
        states = None
    elif isinstance(state, JobState | str):
        states = [JobState(state)]
    else:
        states = [JobState(s) for s in state]
    return JobFilter(
        states=states,
        queue=queue,
        task=task,
        tenant=tenant,
        failure_reason=FailureReason(reason) if reason else None,
        finished_before=finished_before,
    )

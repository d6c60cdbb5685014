"""``Conveyor``: the app users hold. A thin facade: registration here, shared
state in :class:`~conveyor.runtime.Runtime`, which the roles get instead of the app."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from conveyor.backends.base import Backend, QueueInfo, ScheduleSpec, TenantCount, WorkerInfo
from conveyor.dlq import DeadLetters
from conveyor.errors import JobNotFound, UnknownTask
from conveyor.events import Callback, EventBus
from conveyor.filters import job_filter
from conveyor.flow import (
    KEYS_SHOWN,
    RATE_KEYS_SHOWN,
    TENANTS_SHOWN,
    KeyUsage,
    RateUsage,
    key_usage,
    rate_usage,
    tenant_usage,
)
from conveyor.job import FailureReason, Job, JobState
from conveyor.queueoptions import queue_info
from conveyor.ratelimit import RateLimit
from conveyor.retry import Backoff
from conveyor.runtime import EnqueueItem, Runtime
from conveyor.scheduler.admin import Schedules
from conveyor.settings import Settings, load_settings
from conveyor.task import FunctionHandler, Handler, Task, build_options
from conveyor.workflow import Node, Step, Workflow
from conveyor.workflow import start as start_workflow

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
        self.runtime = Runtime(settings or load_settings(url=url, **overrides))
        self.settings: Settings = self.runtime.settings
        self.events: EventBus = self.runtime.events
        self.dlq = DeadLetters(self.runtime)
        self.schedules = Schedules(self.runtime)

    # -- configuration ------------------------------------------------------
    @property
    def url(self) -> str:
        return self.settings.url

    @property
    def tasks(self) -> Mapping[str, Task]:
        return self.runtime.tasks

    def task(self, name: str | None = None, **options: Any) -> Callable[[Callable[..., Any]], Task]:
        """Register ``fn(ctx, **payload)`` as a task. Options: queue, attempts,
        backoff, timeout, priority, rate_limit, concurrency, ttl, keep_completed,
        keep_failed, circuit_threshold, circuit_open_for, retry_on, no_retry_on,
        batch_size, batch_wait (a batch task: ``fn(ctx, jobs)`` returns one outcome
        per job; see docs/how-to/batches.md)."""
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
        tasks = self.runtime.tasks
        if handler.name in tasks:
            raise ValueError(f"task {handler.name!r} is already registered")
        task = Task(self.runtime, handler)
        tasks[task.name] = task
        self.runtime.builder.forget()
        return task

    def get_task(self, name: str) -> Task:
        try:
            return self.runtime.tasks[name]
        except KeyError:
            raise UnknownTask(f"no task named {name!r} is registered") from None

    def on(self, event: str, callback: Callback | None = None) -> Any:
        """Listen to an event: ``app.on("completed", fn)`` or as a decorator."""
        if callback is None:
            return lambda fn: self.events.on(event, fn)
        return self.events.on(event, callback)

    def queue(
        self,
        name: str,
        max_size: int | None = None,
        ttl: float | str | None = None,
        fairness: str | None = None,
        weights: Mapping[str, float] | None = None,
    ) -> None:
        """Per-queue options, stored in the backend when the app connects.
        ``fairness="tenant"`` claims the queue's jobs weighted round-robin across
        tenants (``weights``: tenant -> weight, others weigh 1). Raises
        :class:`~conveyor.errors.InvalidQueueOptions` on anything invalid."""
        info = queue_info(name, max_size, ttl, fairness, weights)
        self.runtime.queues[name] = info
        if self.runtime.opened:
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
        if name in self.runtime.schedules:
            raise InvalidSchedule(f"schedule {name!r} is already declared")
        self.runtime.schedules[name] = spec
        return spec

    @property
    def schedule_specs(self) -> Mapping[str, ScheduleSpec]:
        """The schedules this app's code declares, by name."""
        return self.runtime.schedules

    # -- connection -----------------------------------------------------------
    @property
    def backend(self) -> Backend:
        return self.runtime.backend

    async def connect(self) -> Backend:
        """Open the backend (once) and store declared queue options."""
        return await self.runtime.connect()

    async def close(self) -> None:
        await self.runtime.close()

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
        return await self.runtime.enqueue(task, payload, connection=connection, **options)

    async def enqueue_many(
        self, items: Iterable[EnqueueItem], *, connection: Any = None
    ) -> list[Job]:
        """Enqueue many jobs in one round trip, atomically: all or none.

        ``connection``: the caller's own database connection (PostgreSQL: an
        asyncpg connection or a psycopg 3 ``AsyncConnection``) with a
        transaction open; the jobs commit or roll back with it."""
        return await self.runtime.enqueue_many(items, connection=connection)

    def enqueue_sync(self, task: str, payload: Any = None, **options: Any) -> Job:
        """Enqueue from sync code (Django, Flask, scripts); safe from any thread."""
        return self.runtime.enqueue_sync(task, payload, **options)

    # -- workflows --------------------------------------------------------------
    def step(self, task: str | Task, payload: Any = None, **options: Any) -> Step:
        """A workflow step (a job not enqueued yet) with ``app.enqueue``'s options."""
        name = task.name if isinstance(task, Task) else task
        return Step(name, payload, options)

    async def start(self, workflow: Node) -> Workflow:
        """Start a workflow (``chain``, ``group``, ``chord``, or one step): every job
        stored in one backend call, or none. Raises ``InvalidWorkflow`` for an
        unknown task or dependency before anything is stored."""
        return await start_workflow(self.runtime, workflow)

    def start_sync(self, workflow: Node) -> Workflow:
        """:meth:`start` from sync code."""
        started = self.runtime.call_sync(lambda runtime: start_workflow(runtime, workflow))
        return started.on(self.runtime)

    async def get_workflow(self, workflow_id: str) -> Workflow | None:
        """A started workflow by id, with its jobs as stored now."""
        return await Workflow.load(self.runtime, workflow_id)

    # -- reading and acting ------------------------------------------------------
    async def get_job(self, job_id: str) -> Job | None:
        return await self.runtime.get_job(job_id)

    async def wait_for_job(
        self, job_id: str, timeout: float | None = None, poll: float = 0.05
    ) -> Job:
        """Poll until the job is terminal; raises TimeoutError / JobNotFound."""
        return await self.runtime.wait_for_job(job_id, timeout=timeout, poll=poll)

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
        return self.runtime.bind_all(jobs)

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
            self.runtime.local_workers.request_cancel(job_id)
        return job

    async def stats(self) -> dict[str, dict[str, int]]:
        """``{queue: {waiting, delayed, active, completed, failed, cancelled}}``."""
        backend = await self.connect()
        return await backend.queue_counts()

    async def key_usage(self, limit: int = KEYS_SHOWN) -> list[KeyUsage]:
        """Running jobs per concurrency key, and waiting ones for the key-capped
        tasks: of this app's key-capped tasks (with their caps) and of any active
        job that carries a key; the ``limit`` busiest first."""
        caps = {
            name: task.options.key_concurrency
            for name, task in self.tasks.items()
            if task.options.key_concurrency
        }
        return await key_usage(await self.connect(), caps, limit)

    def key_rate_limits(self) -> dict[str, RateLimit]:
        """The rate limits of this app's tasks that count per ``rate_limit_key``."""
        return {
            name: task.options.rate_limit
            for name, task in self.tasks.items()
            if task.options.rate_limit is not None and task.options.rate_limit_key is not None
        }

    async def rate_usage(self, limit: int = RATE_KEYS_SHOWN) -> list[RateUsage]:
        """Starts in the current window per rate-limit key of this app's tasks
        limited per key, against their limits; the ``limit`` fullest first."""
        return await rate_usage(await self.connect(), self.key_rate_limits(), limit)

    async def queues(self) -> list[QueueInfo]:
        backend = await self.connect()
        return await backend.list_queues()

    async def tenant_usage(self, limit: int = TENANTS_SHOWN) -> dict[str, list[TenantCount]]:
        """Per fair queue, waiting (and delayed) and running jobs of its ``limit``
        tenants with most waiting."""
        backend = await self.connect()
        return await tenant_usage(backend, await backend.list_queues(), limit)

    async def pause_queue(self, name: str) -> None:
        backend = await self.connect()
        await backend.set_queue_paused(name, True)

    async def resume_queue(self, name: str) -> None:
        backend = await self.connect()
        await backend.set_queue_paused(name, False)
        self.runtime.local_workers.wake()

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

        return Worker(self.runtime, **options)

    def scheduler(self, **options: Any) -> Scheduler:
        """A scheduler for this app's schedules (``max_sleep``, ``misfire_grace``,
        ``install_signals``); ``await scheduler.run()`` until ``scheduler.stop()``."""
        from conveyor.scheduler.scheduler import Scheduler

        return Scheduler(self.runtime, **options)

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
        return self.runtime.backoff_for(task)

"""Tasks: named handlers with defaults, in function or class form."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from conveyor.durations import parse_duration
from conveyor.ratelimit import RateLimit
from conveyor.retry import Backoff
from conveyor.settings import Retention

if TYPE_CHECKING:
    from conveyor.context import BatchContext, JobContext
    from conveyor.job import Job
    from conveyor.workflow import Step


class Enqueuer(Protocol):
    """What a task enqueues through (its app's runtime)."""

    async def enqueue(self, task: str, payload: Any = None, **options: Any) -> Job: ...

    def enqueue_sync(self, task: str, payload: Any = None, **options: Any) -> Job: ...


class Priority:
    """Named priorities; any integer works, higher runs first."""

    CRITICAL = 20
    HIGH = 10
    NORMAL = 0
    LOW = -10


#: ``"tenant"``, or a function of the payload returning the key.
KeySource = str | Callable[[Any], str] | None


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """A task's defaults. ``None`` means "the app's setting"."""

    queue: str = "default"
    attempts: int | None = None
    backoff: Backoff | None = None
    timeout: float | None = None
    priority: int = Priority.NORMAL
    rate_limit: RateLimit | None = None
    concurrency: int | None = None
    ttl: float | None = None
    idempotency_ttl: float | None = None
    #: At most this many jobs of the task run at once per concurrency key,
    #: counted over every worker (``None``: no such cap).
    key_concurrency: int | None = None
    #: What a job's concurrency key is: its tenant (``"tenant"``) or a function of
    #: the payload, evaluated at enqueue (``None``: one group for the whole task).
    concurrency_key: KeySource = None
    #: What window a job's start counts in under ``rate_limit``: its tenant
    #: (``"tenant"``) or a function of the payload, evaluated at enqueue
    #: (``None``: one window for the whole task).
    rate_limit_key: KeySource = None
    #: Seconds a debounced enqueue (with an ``idempotency_key``) postpones the job.
    debounce: float | None = None
    keep_completed: Retention = None
    keep_failed: Retention = None
    circuit_threshold: int | None = None
    circuit_open_for: float | None = None
    retry_on: tuple[type[BaseException], ...] = ()
    no_retry_on: tuple[type[BaseException], ...] = ()
    #: A batch task's handler takes up to this many jobs at once (None: one job).
    batch_size: int | None = None
    #: How long a batch short of ``batch_size`` waits for more jobs, in seconds.
    batch_wait: float = 0.0
    keep_completed_set: bool = field(default=False, repr=False)
    keep_failed_set: bool = field(default=False, repr=False)


_UNSET: Any = object()


def build_options(
    *,
    queue: str = "default",
    attempts: int | None = None,
    backoff: Backoff | None = None,
    timeout: float | str | None = None,
    priority: int = Priority.NORMAL,
    rate_limit: str | RateLimit | None = None,
    concurrency: int | None = None,
    ttl: float | str | None = None,
    idempotency_ttl: float | str | None = None,
    key_concurrency: int | None = None,
    concurrency_key: KeySource = None,
    rate_limit_key: KeySource = None,
    debounce: float | str | None = None,
    keep_completed: Any = _UNSET,
    keep_failed: Any = _UNSET,
    circuit_threshold: int | None = None,
    circuit_open_for: float | str | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    no_retry_on: tuple[type[BaseException], ...] = (),
    batch_size: int | None = None,
    batch_wait: float | str | None = None,
) -> TaskOptions:
    """Validate user-facing task options into :class:`TaskOptions`."""
    from conveyor.settings import _retention

    if attempts is not None and attempts < 1:
        raise ValueError("attempts must be >= 1")
    if concurrency is not None and concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if not queue:
        raise ValueError("queue must be a non-empty name")
    key_ttl = None
    if idempotency_ttl is not None:
        from conveyor.producer import positive_duration

        key_ttl = positive_duration("idempotency_ttl", idempotency_ttl)
    if batch_size is not None and (
        isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
    ):
        raise ValueError(f"batch_size must be an integer >= 1, not {batch_size!r}")
    if batch_wait is not None and batch_size is None:
        raise ValueError("batch_wait needs batch_size (it is how long a batch waits to fill)")
    _check_key_concurrency(key_concurrency, concurrency_key)
    _check_rate_limit_key(rate_limit, rate_limit_key)
    return TaskOptions(
        queue=queue,
        attempts=attempts,
        backoff=backoff,
        timeout=parse_duration(timeout) if timeout is not None else None,
        priority=int(priority),
        rate_limit=RateLimit.parse(rate_limit) if isinstance(rate_limit, str) else rate_limit,
        concurrency=concurrency,
        ttl=parse_duration(ttl) if ttl is not None else None,
        idempotency_ttl=key_ttl,
        key_concurrency=key_concurrency,
        concurrency_key=concurrency_key,
        rate_limit_key=rate_limit_key,
        debounce=_debounce_seconds(debounce),
        keep_completed=None if keep_completed is _UNSET else _retention(keep_completed),
        keep_failed=None if keep_failed is _UNSET else _retention(keep_failed),
        keep_completed_set=keep_completed is not _UNSET,
        keep_failed_set=keep_failed is not _UNSET,
        circuit_threshold=circuit_threshold,
        circuit_open_for=parse_duration(circuit_open_for) if circuit_open_for is not None else None,
        retry_on=tuple(retry_on),
        no_retry_on=tuple(no_retry_on),
        batch_size=batch_size,
        batch_wait=parse_duration(batch_wait) if batch_wait is not None else 0.0,
    )


def _check_key_concurrency(cap: int | None, key: KeySource) -> None:
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise ValueError(f"key_concurrency must be an integer >= 1, not {cap!r}")
    if key is None:
        return
    if cap is None:
        raise ValueError("concurrency_key needs key_concurrency (the cap it counts against)")
    if not (key == "tenant" or callable(key)):
        raise ValueError(
            f"concurrency_key must be 'tenant' or a function of the payload, not {key!r}"
        )


def _check_rate_limit_key(rate: str | RateLimit | None, key: KeySource) -> None:
    if key is None:
        return
    if rate is None:
        raise ValueError("rate_limit_key needs rate_limit (the limit each key's window counts to)")
    if not (key == "tenant" or callable(key)):
        raise ValueError(
            f"rate_limit_key must be 'tenant' or a function of the payload, not {key!r}"
        )


def _debounce_seconds(debounce: float | str | None) -> float | None:
    if debounce is None:
        return None
    from conveyor.producer import positive_duration

    return positive_duration("debounce", debounce)


class Handler:
    """The class form of a task. Options are class attributes; override the hooks you need.

    ``process`` (and the hooks) may be ``async def`` or plain ``def``; plain ones
    run in the worker's thread pool. A handler that sets ``batch_size`` is a batch
    task: it defines ``process_batch`` instead of ``process``.
    """

    name: str = ""
    queue: str = "default"
    attempts: int | None = None
    backoff: Backoff | None = None
    timeout: float | str | None = None
    priority: int = Priority.NORMAL
    rate_limit: str | None = None
    concurrency: int | None = None
    ttl: float | str | None = None
    idempotency_ttl: float | str | None = None
    key_concurrency: int | None = None
    concurrency_key: KeySource = None
    rate_limit_key: KeySource = None
    debounce: float | str | None = None
    circuit_threshold: int | None = None
    circuit_open_for: float | str | None = None
    retry_on: tuple[type[BaseException], ...] = ()
    no_retry_on: tuple[type[BaseException], ...] = ()
    batch_size: int | None = None
    batch_wait: float | str | None = None

    def options(self) -> TaskOptions:
        extra: dict[str, Any] = {}
        for key in ("keep_completed", "keep_failed"):
            if hasattr(self, key):
                extra[key] = getattr(self, key)
        return build_options(
            queue=self.queue,
            attempts=self.attempts,
            backoff=self.backoff,
            timeout=self.timeout,
            priority=self.priority,
            rate_limit=self.rate_limit,
            concurrency=self.concurrency,
            ttl=self.ttl,
            idempotency_ttl=self.idempotency_ttl,
            key_concurrency=self.key_concurrency,
            # The function as written in the class body, not bound to the handler.
            concurrency_key=_unbound(inspect.getattr_static(self, "concurrency_key")),
            rate_limit_key=_unbound(inspect.getattr_static(self, "rate_limit_key")),
            debounce=self.debounce,
            circuit_threshold=self.circuit_threshold,
            circuit_open_for=self.circuit_open_for,
            retry_on=self.retry_on,
            no_retry_on=self.no_retry_on,
            batch_size=self.batch_size,
            batch_wait=self.batch_wait,
            **extra,
        )

    def validate(self, payload: Any) -> None:
        """Raise to refuse the payload: the job fails as ``invalid``, never retried."""

    async def process(self, ctx: JobContext, payload: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.process is not implemented")

    async def process_batch(self, ctx: BatchContext, jobs: list[Job]) -> list[Any]:
        """A batch task's handler: one outcome per job, in order (a result, or an
        exception instance that fails that job alone)."""
        raise NotImplementedError(f"{type(self).__name__}.process_batch is not implemented")

    def is_retryable(self, exc: BaseException) -> bool:
        """False fails the job at once, attempts left or not."""
        return True

    async def on_start(self, ctx: JobContext) -> None:
        """Before ``process``, on every attempt."""

    async def on_complete(self, ctx: JobContext, result: Any) -> None:
        """After ``process`` returned."""

    async def on_failed(self, ctx: JobContext, exc: BaseException, will_retry: bool) -> None:
        """After an attempt failed (raised or timed out)."""


def _unbound(attribute: Any) -> Any:
    return attribute.__func__ if isinstance(attribute, staticmethod) else attribute


class FunctionHandler(Handler):
    """A handler made from a function ``fn(ctx, **payload)``."""

    def __init__(self, name: str, fn: Callable[..., Any], options: TaskOptions) -> None:
        self.name = name
        self.fn = fn
        self._options = options
        self.is_async = inspect.iscoroutinefunction(fn)

    def options(self) -> TaskOptions:
        return self._options

    def is_retryable(self, exc: BaseException) -> bool:
        return _retryable_by_rules(self._options, exc)

    def call(self, ctx: JobContext, payload: Any) -> Any:
        if isinstance(payload, dict):
            return self.fn(ctx, **payload)
        return self.fn(ctx, payload)


def _retryable_by_rules(options: TaskOptions, exc: BaseException) -> bool:
    if options.no_retry_on and isinstance(exc, options.no_retry_on):
        return False
    if options.retry_on:
        return isinstance(exc, options.retry_on)
    return True


class Task:
    """A registered handler bound to its app: what ``@app.task`` returns."""

    def __init__(self, enqueuer: Enqueuer, handler: Handler) -> None:
        self._enqueuer = enqueuer
        self.handler = handler
        self.name: str = handler.name
        self.options: TaskOptions = handler.options()
        process: Callable[..., Any] = (
            handler.call if isinstance(handler, FunctionHandler) else handler.process
        )
        if self.options.batch_size is not None and not isinstance(handler, FunctionHandler):
            if type(handler).process_batch is Handler.process_batch:
                raise ValueError(
                    f"{type(handler).__name__} sets batch_size: define "
                    "process_batch(self, ctx, jobs) (it replaces process)"
                )
            process = handler.process_batch
        self.is_async: bool = (
            handler.is_async
            if isinstance(handler, FunctionHandler)
            else inspect.iscoroutinefunction(process)
        )
        self._overrides: dict[str, Any] = {}
        # Which hooks the handler defines, decided once: the worker skips the rest.
        base = Handler
        kind = type(handler)
        self.validates = kind.validate is not base.validate
        self.has_on_start = kind.on_start is not base.on_start
        self.has_on_complete = kind.on_complete is not base.on_complete
        self.has_on_failed = kind.on_failed is not base.on_failed

    def is_retryable(self, exc: BaseException) -> bool:
        if isinstance(self.handler, FunctionHandler):
            return self.handler.is_retryable(exc)
        return _retryable_by_rules(self.options, exc) and self.handler.is_retryable(exc)

    async def enqueue(self, **payload: Any) -> Job:
        """Enqueue one job; keyword arguments are the payload."""
        return await self._enqueuer.enqueue(self.name, payload, **self._overrides)

    def enqueue_sync(self, **payload: Any) -> Job:
        return self._enqueuer.enqueue_sync(self.name, payload, **self._overrides)

    def step(self, **payload: Any) -> Step:
        """This task as a workflow step (not enqueued): ``chain(a.step(x=1), b.step())``."""
        from conveyor.workflow import Step

        return Step(self.name, payload, dict(self._overrides))

    def with_options(self, **options: Any) -> Task:
        """A copy that enqueues with these options: ``task.with_options(delay=5).enqueue(...)``."""
        clone = Task.__new__(Task)
        clone.__dict__.update(self.__dict__)
        clone._overrides = {**self._overrides, **options}
        return clone

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly (tests, composition), bypassing the queue."""
        if isinstance(self.handler, FunctionHandler):
            return self.handler.fn(*args, **kwargs)
        raise TypeError("class handlers are not callable; enqueue them")

    def __repr__(self) -> str:
        return f"<Task {self.name!r} queue={self.options.queue!r}>"

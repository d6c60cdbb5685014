"""Runs one job: validation, hooks, the handler under its timeout, and the
decision of what its outcome is (complete, retry, fail, cancel, release)."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from conveyor import serialization
from conveyor.backends.base import CircuitPolicy, Outcome, Settlement
from conveyor.errors import JobTimeout, UnknownTask, ValidationError
from conveyor.events import EventBus
from conveyor.job import ErrorInfo, FailureReason, Job
from conveyor.logs import current_job
from conveyor.task import FunctionHandler, Task
from conveyor.tracing import consumer_tracing
from conveyor.worker.deadlines import Deadlines
from conveyor.worker.threads import DaemonThreadPool

if TYPE_CHECKING:
    from conveyor.runtime import Runtime
    from conveyor.worker.running import Running

logger = logging.getLogger("conveyor.worker")

MAX_TRACEBACK = 16_000


def error_info(exc: BaseException, attempt: int, reason: FailureReason, at: float) -> ErrorInfo:
    tb = "".join(traceback.format_exception(exc))
    if len(tb) > MAX_TRACEBACK:
        tb = "…" + tb[-MAX_TRACEBACK:]
    return ErrorInfo(
        type=type(exc).__qualname__,
        message=str(exc),
        traceback=tb,
        attempt=attempt,
        reason=reason.value,
        at=at,
    )


class Executor:
    """Turns a claimed job into a :class:`Settlement` (or ``None`` when the
    worker no longer holds the lease and must not report anything)."""

    def __init__(self, runtime: Runtime, worker_id: str, threads: int) -> None:
        self.runtime = runtime
        self.worker_id = worker_id
        self.events: EventBus = runtime.events
        self.settings = runtime.settings
        self._threads = threads
        self._pool: DaemonThreadPool | None = None
        self._circuits: dict[str, CircuitPolicy | None] = {}
        self._abandoned: list[DaemonThreadPool] = []
        self._deadlines = Deadlines()
        self._unknown_tasks: set[str] = set()  # named in the log once each
        # Tracing is decided here, once: the untraced path has no per-job check.
        self._tracing = consumer_tracing(worker_id, self.settings.otel_parent)
        self.execute: Callable[[Running], Awaitable[Settlement | None]] = (
            self._execute if self._tracing is None else self._execute_traced
        )

    async def close(self, grace: float = 1.0) -> None:
        """Stop the thread pools, giving sync handlers that were told to stop
        ``grace`` seconds to return; the rest are abandoned (daemon threads)."""
        self._deadlines.close()
        pools = [*self._abandoned, *([self._pool] if self._pool else [])]
        self._pool, self._abandoned = None, []
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + grace
        stuck = 0
        for pool in pools:
            stuck += await asyncio.to_thread(pool.join, max(0.0, deadline - time.monotonic()))
        if stuck:
            logger.warning("%d sync handler(s) still running at exit were abandoned", stuck)

    def _abandon(self, pool: DaemonThreadPool) -> None:
        """A timed-out or cancelled sync handler keeps its thread (it cannot be
        killed): later jobs get a fresh pool instead of waiting behind it."""
        if self._pool is pool:
            self._pool = None
            pool.shutdown(wait=False)
            self._abandoned.append(pool)

    def _thread_pool(self) -> DaemonThreadPool:
        if self._pool is None:
            self._pool = DaemonThreadPool(self._threads, "conveyor-job")
        return self._pool

    def _circuit(self, task: Task) -> CircuitPolicy | None:
        """The task's circuit policy (computed once per task: this is the hot path)."""
        try:
            return self._circuits[task.name]
        except KeyError:
            pass
        threshold = task.options.circuit_threshold
        if threshold is None:
            threshold = self.settings.circuit_threshold
        policy = None
        if threshold > 0:
            open_for = task.options.circuit_open_for or self.settings.circuit_open_for
            policy = CircuitPolicy(threshold, open_for)
        self._circuits[task.name] = policy
        return policy

    def _refuse(self, run: Running, reason: FailureReason, exc: BaseException) -> Settlement:
        """Fail at once, without a retry and without touching the circuit."""
        job = run.job
        info = error_info(exc, job.attempts, reason, time.time())
        if self.events.has("failed"):
            self.events.emit("failed", job=job, error=info, will_retry=False, duration=0.0)
        self._emit_dead(job, info, reason)
        return Settlement(
            job.id, job.lease_token or "", Outcome.FAIL, job.task, error=info, failure_reason=reason
        )

    def _unknown(self, run: Running) -> Settlement:
        """A task this worker does not know: during a rolling deploy another worker
        may, so the job is given back for a while (delayed, attempt not counted)
        and fails ``unknown_task`` once it is older than ``unknown_task_grace``."""
        job = run.job
        grace = self.settings.unknown_task_grace
        # Both times are the backend's: when the job was enqueued and this claim.
        age = max(0.0, (job.started_at or job.created_at) - job.created_at)
        if age >= grace:
            exc = UnknownTask(
                f"no task named {job.task!r} is registered in worker {self.worker_id}"
            )
            return self._refuse(run, FailureReason.UNKNOWN_TASK, exc)
        if job.task not in self._unknown_tasks:
            self._unknown_tasks.add(job.task)
            logger.warning(
                "task %r is not registered in this worker: its jobs are given back until "
                "they are %gs old (unknown_task_grace), then fail unknown_task",
                job.task,
                grace,
            )
        return Settlement(
            job.id,
            job.lease_token or "",
            Outcome.RELEASE,
            job.task,
            retry_delay=unknown_task_delay(age, grace),
        )

    async def _execute_traced(self, run: Running) -> Settlement | None:
        """``_execute`` inside the attempt's CONSUMER span (tracing.py)."""
        tracing = self._tracing
        assert tracing is not None
        span = tracing.start(run.job)
        try:
            with tracing.activate(span):
                settlement = await self._execute(run)
        except BaseException as exc:
            tracing.interrupted(span, exc)
            raise
        tracing.end(span, settlement)
        return settlement

    async def _execute(self, run: Running) -> Settlement | None:
        """Run one attempt (``execute`` is this, or this inside a trace span)."""
        job = run.job
        current_job.set(job)  # this run's own task: log records name the job
        if job.decode_error:
            return self._refuse(run, FailureReason.INVALID, ValidationError(job.decode_error))
        task = self.runtime.tasks.get(job.task)
        if task is None:
            return self._unknown(run)
        handler = task.handler
        if task.validates:
            try:
                handler.validate(job.payload)
            except Exception as exc:
                return self._refuse(run, FailureReason.INVALID, exc)

        if self.events.has("active"):
            self.events.emit("active", job=job, worker_id=self.worker_id)
        started = time.perf_counter()
        try:
            if task.has_on_start:
                await self._hook(handler.on_start, run.ctx)
            result = await self._call(task, run)
            # None is stored as no result (it reads back as None): less to send and
            # store for the many handlers that return nothing.
            encoded = None if result is None else serialization.dumps(result)
        except asyncio.CancelledError as exc:
            reason = run.stop_reason
            current = asyncio.current_task()
            if reason is None:
                if current is not None and current.cancelling() == 0:
                    # Nobody cancelled this run: the handler raised it itself, an error.
                    return await self._failed(run, task, exc, time.perf_counter() - started)
                raise  # the worker itself is being torn down
            if current is not None:
                current.uncancel()
            if reason != "timeout":
                return self._interrupted(run, task, None)
            error: BaseException = self._timed_out(run)
            return await self._failed(run, task, error, time.perf_counter() - started)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too: a job's error
            if run.stop_reason is not None and run.stop_reason != "timeout":
                return self._interrupted(run, task, exc)
            error = self._timed_out(run) if run.stop_reason == "timeout" else exc
            return await self._failed(run, task, error, time.perf_counter() - started)
        if run.stop_reason == "cancel":
            return self._interrupted(run, task, None)
        duration = time.perf_counter() - started
        if task.has_on_complete:
            await self._hook(handler.on_complete, run.ctx, result)
        if self.events.has("completed"):
            self.events.emit("completed", job=job, result=result, duration=duration)
        return Settlement(
            job.id,
            job.lease_token or "",
            Outcome.COMPLETE,
            job.task,
            result=encoded,
            circuit=self._circuit(task),
            progress=run.unsaved_progress,
        )

    async def _call(self, task: Task, run: Running) -> Any:
        job = run.job
        timeout = job.timeout if job.timeout is not None else self.settings.default_timeout
        handler = task.handler
        call: Callable[[], Any]
        if isinstance(handler, FunctionHandler):
            fn = handler.call
            call = lambda: fn(run.ctx, job.payload)  # noqa: E731  # one closure, two call styles
        else:
            process = handler.process
            call = lambda: process(run.ctx, job.payload)  # noqa: E731

        # Interrupts the run with "timeout" (one loop timer for all runs: deadlines.py).
        self._deadlines.add(run, timeout)
        try:
            if task.is_async:
                # What _run_handler does for it, inline: one coroutine less per job
                # on the hot path (measurable in a no-op drain).
                return await call()
            return await self._run_handler(task, call)
        except TypeError as exc:
            # Payload keys that don't fit the function's parameters are bad input.
            if isinstance(handler, FunctionHandler) and isinstance(job.payload, dict):
                try:
                    inspect.signature(handler.fn).bind(run.ctx, **job.payload)
                except TypeError as bind_error:
                    raise ValidationError(f"payload does not fit {job.task}: {bind_error}") from exc
            raise
        finally:
            self._deadlines.discard(run)

    async def _run_handler(self, task: Task, call: Callable[[], Any]) -> Any:
        """``call()`` on the loop (async handlers) or in the thread pool (sync
        ones); a sync call still running when cancelled leaves its pool behind."""
        if task.is_async:
            return await call()
        pool = self._thread_pool()
        future = pool.submit(contextvars.copy_context().run, call)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if future.running():
                self._abandon(pool)
            raise

    async def _failed(
        self, run: Running, task: Task, exc: BaseException, duration: float
    ) -> Settlement:
        job = run.job
        if isinstance(exc, ValidationError):
            return self._refuse(run, FailureReason.INVALID, exc)
        reason = FailureReason.TIMEOUT if isinstance(exc, JobTimeout) else FailureReason.ERROR
        retryable = _safe_retryable(task, exc)
        will_retry = retryable and job.attempts < job.max_attempts
        info = error_info(exc, job.attempts, reason, time.time())
        if task.has_on_failed:
            await self._hook(task.handler.on_failed, run.ctx, exc, will_retry)
        if self.events.has("failed"):
            self.events.emit(
                "failed", job=job, error=info, will_retry=will_retry, duration=duration
            )
        circuit = self._circuit(task)
        token = job.lease_token or ""
        if will_retry:
            delay = self.runtime.backoff_for(task).delay(job.attempts)
            if self.events.has("retrying"):
                self.events.emit("retrying", job=job, delay=delay)
            return Settlement(
                job.id,
                token,
                Outcome.RETRY,
                job.task,
                error=info,
                retry_delay=delay,
                circuit=circuit,
                progress=run.unsaved_progress,
            )
        self._emit_dead(job, info, reason)
        return Settlement(
            job.id,
            token,
            Outcome.FAIL,
            job.task,
            error=info,
            failure_reason=reason,
            circuit=circuit,
            progress=run.unsaved_progress,
        )

    def _timed_out(self, run: Running) -> JobTimeout:
        job = run.job
        timeout = job.timeout if job.timeout is not None else self.settings.default_timeout
        return JobTimeout(f"job {job.id} timed out after {timeout:g}s")

    def _interrupted(
        self, run: Running, task: Task, exc: BaseException | None
    ) -> Settlement | None:
        job = run.job
        token = job.lease_token or ""
        if run.stop_reason == "lease_lost":
            return None  # not ours any more: the stall reaper or the new holder decides
        if run.stop_reason == "shutdown":
            return Settlement(
                job.id, token, Outcome.RELEASE, job.task, progress=run.unsaved_progress
            )
        info = error_info(exc, job.attempts, FailureReason.ERROR, time.time()) if exc else None
        if self.events.has("cancelled"):
            self.events.emit("cancelled", job=job)
        return Settlement(
            job.id, token, Outcome.CANCEL, job.task, error=info, progress=run.unsaved_progress
        )

    def _emit_dead(self, job: Job, info: ErrorInfo, reason: FailureReason) -> None:
        if self.events.has("dead"):
            self.events.emit("dead", job=job, reason=reason.value, error=info)

    async def _hook(self, hook: Callable[..., Any], *args: Any) -> None:
        """Hooks never fail a job: an exception is logged and reported as an event."""
        try:
            if inspect.iscoroutinefunction(hook):
                await hook(*args)
            else:  # a plain ``def`` hook runs in the thread pool, like a plain ``process``
                loop = asyncio.get_running_loop()
                outcome = await loop.run_in_executor(self._thread_pool(), hook, *args)
                if inspect.isawaitable(outcome):
                    await outcome
        except Exception as exc:
            logger.exception("hook %s failed", getattr(hook, "__qualname__", hook))
            self.events.emit("error", error=exc, where=f"hook {getattr(hook, '__name__', hook)}")


#: How long a job of an unknown task waits before it is claimed again: first
#: UNKNOWN_FIRST_DELAY, then as long as it is old (so each wait about doubles
#: its age), at most UNKNOWN_MAX_DELAY, and never much past the end of the grace.
UNKNOWN_FIRST_DELAY = 1.0
UNKNOWN_MAX_DELAY = 30.0


def unknown_task_delay(age: float, grace: float) -> float:
    """The ``retry_delay`` of a release of an unknown task's job ``age`` seconds
    old (``age < grace``). Its last wait ends at the grace, so the claim after
    it finds the job old enough to fail."""
    delay = min(UNKNOWN_MAX_DELAY, max(UNKNOWN_FIRST_DELAY, age))
    return max(0.01, min(delay, grace - age))


def _safe_retryable(task: Task, exc: BaseException) -> bool:
    try:
        return task.is_retryable(exc)
    except Exception:
        logger.exception("is_retryable raised; treating the error as retryable")
        return True

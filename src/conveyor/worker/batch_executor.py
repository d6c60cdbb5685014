"""Runs one batch: per-job validation, the handler under the batch's timeout,
and one outcome per job, decided for each job alone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from conveyor import serialization
from conveyor.backends.base import CircuitPolicy, Outcome, Settlement
from conveyor.context import BatchContext
from conveyor.errors import JobTimeout, ValidationError
from conveyor.job import FailureReason
from conveyor.task import FunctionHandler, Task
from conveyor.worker.executor import Executor

if TYPE_CHECKING:
    from conveyor.worker.batching import Batch, BatchMember

#: What a batch returns: each member with its settlement (None: not ours to report).
Outcomes = list[tuple["BatchMember", Settlement | None]]


class BatchExecutor(Executor):
    """The :class:`Executor`, plus batches (a subclass: the single-job path is untouched)."""

    async def execute_batch(self, batch: Batch) -> Outcomes:
        """Run ``batch``; with tracing live, each job in it gets its own CONSUMER span."""
        if self._tracing is None:
            return await self._execute_batch(batch)
        return await self._execute_batch_traced(batch)

    async def _execute_batch_traced(self, batch: Batch) -> Outcomes:
        """``_execute_batch`` with one CONSUMER span per job, each a child of
        (or linked to) that job's own stored trace context. None is made
        current: the handler's own spans belong to the batch, not to one job."""
        tracing = self._tracing
        assert tracing is not None
        spans = {member.job.id: tracing.start(member.job) for member in batch.members}
        for span in spans.values():
            span.set_attribute("conveyor.batch.size", len(batch.members))
        try:
            out = await self._execute_batch(batch)
        except BaseException as exc:
            for span in spans.values():
                tracing.interrupted(span, exc)
            raise
        for member, settlement in out:
            tracing.end(spans.pop(member.job.id), settlement)
        for span in spans.values():  # every member has an outcome; never leave a span open
            tracing.end(span, None)
        return out

    async def _execute_batch(self, batch: Batch) -> Outcomes:
        task = batch.task
        out: Outcomes = []
        ready: list[BatchMember] = []
        for member in batch.members:
            job = member.job
            if member.stop_reason is not None:  # cancelled or lost while gathering
                out.append((member, self._interrupted(member, task, None)))
            elif job.decode_error:
                invalid = ValidationError(job.decode_error)
                out.append((member, self._refuse(member, FailureReason.INVALID, invalid)))
            elif task.validates:
                try:
                    task.handler.validate(job.payload)
                    ready.append(member)
                except Exception as exc:  # invalid jobs are left out of the batch
                    out.append((member, self._refuse(member, FailureReason.INVALID, exc)))
            else:
                ready.append(member)
        if not ready:
            return out
        # Set before any await: from here a stopped member may stop the whole batch.
        batch.live = ready
        ctx = batch.ctx = BatchContext([member.ctx for member in ready], self.worker_id)
        if self.events.has("active"):
            for member in ready:
                self.events.emit("active", job=member.job, worker_id=self.worker_id)
        started = time.perf_counter()
        try:
            if task.has_on_start:
                for member in ready:
                    await self._hook(task.handler.on_start, member.ctx)
            results = await self._call_batch(task, batch, ctx)
        except asyncio.CancelledError as exc:
            current = asyncio.current_task()
            if not batch.interrupted:
                if current is not None and current.cancelling() == 0:
                    # Nobody cancelled the batch: the handler raised it itself, an error.
                    return out + await self._each_failed(ready, task, exc, started)
                raise  # the worker itself is being torn down
            if current is not None:
                current.uncancel()
            return out + await self._each_failed(ready, task, None, started)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too: the jobs' error
            return out + await self._each_failed(ready, task, exc, started)
        if not isinstance(results, list) or len(results) != len(ready):
            got = (
                f"a list of {len(results)}" if isinstance(results, list) else type(results).__name__
            )
            error = TypeError(
                f"batch handler {task.name} returned {got} for {len(ready)} jobs: it must "
                "return a list with one outcome per job, in order"
            )
            return out + await self._each_failed(ready, task, error, started)
        duration = time.perf_counter() - started
        # Looked up once per batch, not per job.
        plain = not task.has_on_complete and not self.events.has("completed")
        circuit = self._circuit(task)
        for member, result in zip(ready, results, strict=True):
            if plain and result is None and member.stop_reason is None:
                # The common case: nothing to encode, no hook, no event.
                settlement: Settlement | None = _completed(member, None, circuit)
            else:
                settlement = await self._outcome(member, task, result, duration)
            out.append((member, settlement))
        return out

    async def _call_batch(self, task: Task, batch: Batch, ctx: BatchContext) -> Any:
        handler = task.handler
        fn = handler.fn if isinstance(handler, FunctionHandler) else handler.process_batch
        jobs = list(ctx.jobs)
        call: Callable[[], Any] = lambda: fn(ctx, jobs)  # noqa: E731
        # The batch runs until the earliest deadline among its jobs.
        default = self.settings.default_timeout
        timeout = min(m.job.timeout if m.job.timeout is not None else default for m in batch.live)
        self._deadlines.add(batch, timeout)
        try:
            return await self._run_handler(task, call)
        finally:
            self._deadlines.discard(batch)

    async def _outcome(
        self, member: BatchMember, task: Task, result: Any, duration: float
    ) -> Settlement | None:
        """One job's outcome from what the handler returned for it."""
        if member.stop_reason in ("cancel", "lease_lost"):
            return self._interrupted(member, task, None)  # cancel wins over any result
        if isinstance(result, BaseException):
            return await self._failed(member, task, result, duration)
        try:
            encoded = None if result is None else serialization.dumps(result)
        except Exception as exc:  # this job's result alone cannot be stored
            return await self._failed(member, task, exc, duration)
        job = member.job
        if task.has_on_complete:
            await self._hook(task.handler.on_complete, member.ctx, result)
        if self.events.has("completed"):
            self.events.emit("completed", job=job, result=result, duration=duration)
        return _completed(member, encoded, self._circuit(task))

    async def _each_failed(
        self, members: list[BatchMember], task: Task, exc: BaseException | None, started: float
    ) -> Outcomes:
        """The batch as a whole raised (or was stopped): each job's outcome by
        its own stop reason, attempts and retry rules."""
        duration = time.perf_counter() - started
        out: Outcomes = []
        for member in members:
            reason = member.stop_reason
            if reason is not None and reason != "timeout":
                out.append((member, self._interrupted(member, task, exc)))
                continue
            error = exc
            if reason == "timeout" or error is None:
                timeout = member.job.timeout
                if timeout is None:
                    timeout = self.settings.default_timeout
                error = JobTimeout(
                    f"job {member.job.id} timed out: its batch ran past the earliest "
                    f"deadline of its jobs ({duration:.3g}s; this job's timeout {timeout:g}s)"
                )
            out.append((member, await self._failed(member, task, error, duration)))
        return out


def _completed(
    member: BatchMember, encoded: bytes | None, circuit: CircuitPolicy | None
) -> Settlement:
    """A job of the batch completed with ``encoded`` as its result."""
    job = member.job
    return Settlement(
        job.id,
        job.lease_token or "",
        Outcome.COMPLETE,
        job.task,
        result=encoded,
        circuit=circuit,
        progress=member.unsaved_progress,
    )

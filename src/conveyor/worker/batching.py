"""Batch tasks on the worker's side: gathering claimed jobs into batches.

A batch task's jobs are claimed, leased and buffered like any other; each is a
:class:`BatchMember`. When one would start (a slot is free), it gathers up to
``batch_size`` buffered jobs of its task into a :class:`Batch`; a batch short
of that waits up to ``batch_wait`` for more, which join it straight from the
claims. A batch holds ONE of the worker's slots (its handler is one coroutine)
while every job in it counts against its task's ``concurrency`` cap.

Slots: a running member sits in ``worker.active`` like a single job (leases,
cancels, progress and shutdown find it there); the worker's slot count
``_slots`` grows by one for each member beyond a batch's first, so that
``len(active) < _slots`` still means "a slot is free" at no extra cost per job.
While a batch forms, ``_room`` lets the claim loop claim the jobs it still
lacks. Single jobs pay one ``is None`` test in ``_hold`` and ``_start``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from conveyor.backends.base import Outcome
from conveyor.context import BatchContext, JobContext
from conveyor.worker.running import Running, StopReason

if TYPE_CHECKING:
    from conveyor.job import Job
    from conveyor.task import Task
    from conveyor.worker.worker import Worker

logger = logging.getLogger("conveyor.worker")

#: How long a batch without a batch_wait gathers at most (it waits for a claim).
_DUE_NOW_WAIT = 0.05


@dataclass(slots=True, eq=False)
class BatchMember(Running):
    """One job of a batch task; interrupting it tells its batch."""

    batch: Batch | None = None

    def interrupt(self, reason: StopReason) -> None:
        if self.stop_reason is None or reason == "lease_lost":
            self.stop_reason = reason
        self.ctx.mark_cancelled()
        if self.batch is not None:
            self.batch.member_stopped()


@dataclass(eq=False)
class Batch:
    """Jobs of one batch task that run in one call of its handler."""

    task: Task
    members: list[BatchMember] = field(default_factory=list)
    #: The members the handler was given (set when it starts).
    live: list[BatchMember] = field(default_factory=list)
    ctx: BatchContext | None = None
    runner: asyncio.Task[None] | None = None
    #: Set when the batch stops gathering: full, or every member was stopped.
    full: asyncio.Event = field(default_factory=asyncio.Event)
    #: The handler was interrupted as a whole (timeout, or every job stopped).
    interrupted: bool = False
    #: What this batch adds to the worker's ``_room`` while it gathers.
    room: int = 0
    #: Claims that came back while it gathered (a batch without batch_wait).
    claims: int = 0

    def member_stopped(self) -> None:
        """A member was cancelled, lost its lease or is shut down: once every one
        the handler works for is, the batch stops (or stops gathering)."""
        members = self.live if self.ctx is not None else self.members
        if any(member.stop_reason is None for member in members):
            return
        if self.ctx is None:
            self.full.set()
        else:
            self._stop("cancel")

    def interrupt(self, reason: StopReason) -> None:
        """The batch's deadline (the earliest of its jobs') passed: every job still
        in it is stopped with ``reason``."""
        for member in self.live:
            if member.stop_reason is None:
                member.stop_reason = reason
                member.ctx.mark_cancelled()
        self._stop(reason)

    def _stop(self, reason: StopReason) -> None:
        self.interrupted = True
        if self.ctx is not None:
            self.ctx.mark_cancelled()
        if self.runner is not None and not self.runner.done():
            self.runner.cancel(reason)


class Batcher:
    """Gathers a worker's batch-task jobs into batches and runs them."""

    def __init__(self, worker: Worker, tasks: dict[str, Task]) -> None:
        self.worker = worker
        self.tasks = tasks
        #: Per task, the batch that is still gathering jobs (at most one).
        self.forming: dict[str, Batch] = {}

    def hold(self, job: Job, lease_deadline: float) -> bool:
        """A claimed job: True when it is a batch task's (then it is held here)."""
        task = self.tasks.get(job.task)
        if task is None:
            return False
        worker = self.worker
        job.bind(worker.runtime)
        member = BatchMember(
            job, JobContext(job, worker.id, worker.on_progress), lease_deadline=lease_deadline
        )
        worker.running_by_task[job.task] = worker.running_by_task.get(job.task, 0) + 1
        forming = self.forming.get(job.task)
        if forming is not None:
            self._join(forming, member)
        elif len(worker.active) < worker.slots and not worker.stopping:
            self._begin(task, member)
        else:
            worker.buffered[job.id] = member
            worker.next_up.append(member)
        return True

    def take(self, run: Running) -> bool:
        """A buffered job about to start in a free slot: True when it is a batch
        task's (then it starts a batch, or joins the one gathering)."""
        if not isinstance(run, BatchMember):
            return False
        forming = self.forming.get(run.job.task)
        if forming is not None:
            self._join(forming, run)
        else:
            self._begin(self.tasks[run.job.task], run)
        return True

    def _begin(self, task: Task, first: BatchMember) -> None:
        """A new batch in a free slot: ``first`` and the buffered jobs of its task."""
        worker = self.worker
        size = task.options.batch_size or 1
        batch = Batch(task)
        self._join(batch, first)
        for run in list(worker.buffered.values()):
            if len(batch.members) >= size:
                break
            if run.job.task == task.name and run.stop_reason is None:
                assert isinstance(run, BatchMember)
                del worker.buffered[run.job.id]  # its stale place in _next is skipped
                self._join(batch, run)
        missing = size - len(batch.members)
        if missing > 0 and not worker.stopping:
            # Short of batch_size: gather from claims too, up to batch_wait; with
            # none, what is due now (claimed()), so the claim loop may claim for it.
            self.forming[task.name] = batch
            batch.room = missing
            worker.room += missing
            worker.slot_free.set()
        else:
            batch.full.set()
        runner = asyncio.create_task(self._run(batch))
        batch.runner = runner
        worker.executing.add(runner)
        runner.add_done_callback(worker.executing.discard)

    def _join(self, batch: Batch, member: BatchMember) -> None:
        worker = self.worker
        member.batch = batch
        batch.members.append(member)
        worker.active[member.job.id] = member
        if len(batch.members) > 1:
            worker.slots += 1  # members beyond the first take no slot
        if self.forming.get(member.job.task) is batch:
            if batch.room > 0:
                batch.room -= 1
                worker.room -= 1
            if len(batch.members) >= (batch.task.options.batch_size or 1):
                self._close(batch)

    def claimed(self, full: bool) -> None:
        """A claim came back (``full``: as many jobs as asked). A batch without a
        batch_wait takes what is due now: it stops gathering after a short claim,
        or after the claim that follows the one that began it."""
        for batch in list(self.forming.values()):
            if batch.task.options.batch_wait == 0:
                batch.claims += 1
                if not full or batch.claims >= 2:
                    self._close(batch)

    def _close(self, batch: Batch) -> None:
        """The batch stops gathering; the room it kept for claims is given up."""
        if self.forming.get(batch.task.name) is batch:
            del self.forming[batch.task.name]
        self.worker.room -= batch.room
        batch.room = 0
        batch.full.set()

    async def _run(self, batch: Batch) -> None:
        worker = self.worker
        try:
            if not batch.full.is_set():
                # Without a batch_wait, a claim normally ends the gathering at once
                # (claimed()); the cap covers handoffs and failed claims.
                wait = batch.task.options.batch_wait or _DUE_NOW_WAIT
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(batch.full.wait(), wait)
            self._close(batch)
            started = time.perf_counter()
            outcomes = await worker.executor.execute_batch(batch)
            duration = time.perf_counter() - started
            # Handed on as a whole: one acker call, one count per (queue, outcome).
            settled = [(s, member.job) for member, s in outcomes if s is not None]
            counts: dict[tuple[str, Outcome], int] = {}
            for settlement, job in settled:
                key = (job.queue, settlement.outcome)
                counts[key] = counts.get(key, 0) + 1
            worker.acker.add_many(settled)
            for (queue, outcome), count in counts.items():
                if outcome is Outcome.COMPLETE:
                    worker.prefetcher.completed(count)
                worker.stats.add_outcome(batch.task.name, queue, outcome, duration, count)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in conveyor itself: leave the jobs to the stall reaper
            logger.exception("internal error while running a batch of %s", batch.task.name)
            worker.runtime.events.emit("error", error=exc, where="executor")
        finally:
            self._close(batch)
            active = worker.active
            for member in batch.members:
                if member.force_handle is not None:
                    member.force_handle.cancel()
                del active[member.job.id]
            held = len(batch.members)
            worker.running_by_task[batch.task.name] -= held  # every member is of this task
            worker.processed += held
            worker.slots -= held - 1
            if worker.next_up and not worker.stopping:
                worker.start_buffered()
            worker.slot_free.set()

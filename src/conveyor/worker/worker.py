"""The worker: claims jobs into free slots and runs them, with side roles.

Prefetch: the worker holds up to ``prefetch`` claimed jobs beyond its slots in
a buffer, so a slot that frees starts the next job at once while the claim
loop refills the buffer in the background. Buffered jobs hold leases like
running ones (renewed, cancellable, distrusted when renewals fail) and count
against per-task caps; they are released, attempt given back, as soon as the
worker stops claiming. By default the buffer's size adapts (prefetch.py).

Batch tasks (a handler that takes many jobs at once) are gathered by the
:class:`Batcher` (batching.py): a batch holds one slot.

Roles: the claim loop (here), the :class:`Executor` (one job), the
:class:`Acker` (batched outcomes), the :class:`LeaseKeeper`, the
:class:`Heartbeat`, and maintenance (stall reaper, retention cleaner). Side
roles are supervised: one that dies stops the worker loudly. They are started,
and the worker shut down, in lifecycle.py.

Shutdown has two phases. Phase one (first SIGTERM/SIGINT, ``stop()``, or a
burst with nothing due): no more claims; running jobs get ``shutdown_timeout``
to finish. Phase two (the deadline, a second signal, or ``stop(force=True)``):
handlers are cancelled and their jobs released at once, the attempt given back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from conveyor.backends.base import (
    ClaimRequest,
    ClaimResult,
    JobFilter,
    Outcome,
    Settlement,
    WorkerInfo,
)
from conveyor.context import JobContext
from conveyor.errors import BackendError, ConveyorError
from conveyor.job import Job, JobState
from conveyor.loops import loop_name
from conveyor.worker import faults
from conveyor.worker.acker import Acker
from conveyor.worker.batch_executor import BatchExecutor
from conveyor.worker.batching import Batcher
from conveyor.worker.leases import LeaseKeeper
from conveyor.worker.lifecycle import on_signal, shut_down, start_side_roles
from conveyor.worker.prefetch import Prefetch
from conveyor.worker.reports import SettleReports
from conveyor.worker.running import Running
from conveyor.worker.stats import StatsReporter
from conveyor.worker.supervision import SideRoles
from conveyor.worker.workflow_events import WorkflowWatch

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Sequence

    from conveyor.dispatch import Dispatcher
    from conveyor.runtime import Runtime
    from conveyor.worker.handoffs import HandoffReceiver
    from conveyor.worker.memory import MemoryWatch

    #: What the claim loop awaits between claims (queues, poll timeout).
    WaitForWork = Callable[[Sequence[str], float], Coroutine[Any, Any, None]]

logger = logging.getLogger("conveyor.worker")
#: With RabbitMQ dispatch, how long a burst's claims must come back empty.
DISPATCH_GRACE = 0.05

#: Longest wait between claims of a worker with key-capped tasks (seconds).
KEY_SLOT_POLL = 0.1

#: How long after a short claim sent with outcomes a wake-up is taken for the
#: store's echo of those outcomes while a job runs (seconds): the loop then lets
#: that job's outcome claim instead (see Worker._wait_for_work).
ECHO_WINDOW = 0.005


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(2).hex()}"


class WorkerCrashed(ConveyorError):
    """A side role of the worker died; the worker stopped."""


class Worker:
    def __init__(
        self,
        runtime: Runtime,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        prefetch: int | None = None,
        burst: bool = False,
        worker_id: str | None = None,
        install_signals: bool = True,
        maintenance: bool = True,
    ) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.id = worker_id or default_worker_id()
        if queues:
            listen = list(dict.fromkeys(queues))
        else:
            listen = ["default", *sorted({t.options.queue for t in runtime.tasks.values()})]
            listen = list(dict.fromkeys(listen))
        self.own_queue = f"worker.{self.id}"
        self.queues: list[str] = [*listen, self.own_queue]
        self.concurrency = concurrency or self.settings.concurrency
        #: Slots to fill: ``concurrency``, plus one per job beyond a batch's first
        #: (a batch holds one slot; batching.py), so ``len(active) < _slots`` still
        #: means "a slot is free". ``_room``: jobs gathering batches may still claim.
        self.slots = self.concurrency
        self.room = 0
        self.burst = burst
        self.install_signals = install_signals
        self.maintenance = maintenance
        self.processed = 0
        #: Runs given back (shutdown; or delayed, a task this worker does not
        #: know): not finished, attempt not spent.
        self.released = 0
        self.active: dict[str, Running] = {}
        #: Claimed, not started yet (prefetch); ``_next`` holds their order.
        self.buffered: dict[str, Running] = {}
        self.next_up: deque[Running] = deque()
        self.started_at = 0.0
        #: Jobs held per task (running or buffered): what per-task caps count.
        self.running_by_task: dict[str, int] = {}
        self.executing: set[asyncio.Task[Any]] = set()
        self.stopping = False
        self.forced = asyncio.Event()
        self._wake = asyncio.Event()
        self.slot_free = asyncio.Event()
        self.roles = SideRoles(runtime.events, self.stop)
        self.signals_seen = 0
        self._loop_thread = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self.capped = {
            n: t.options.concurrency for n, t in runtime.tasks.items() if t.options.concurrency
        }
        self.rate_limited = {
            n: t.options.rate_limit
            for n, t in runtime.tasks.items()
            if t.options.rate_limit and t.options.rate_limit_key is None
        }
        #: Cluster-wide rate limits with one window per rate_limit_key.
        self.key_rate_limited = {
            n: t.options.rate_limit
            for n, t in runtime.tasks.items()
            if t.options.rate_limit and t.options.rate_limit_key is not None
        }
        #: Cluster-wide caps per concurrency key, enforced by the store at claim.
        self.key_capped = {
            n: t.options.key_concurrency
            for n, t in runtime.tasks.items()
            if t.options.key_concurrency
        }
        batch_tasks = {n: t for n, t in runtime.tasks.items() if t.options.batch_size}
        self._batcher = Batcher(self, batch_tasks) if batch_tasks else None
        #: Most jobs one claim asks for: ``claim_batch``, or a whole batch of the
        #: largest batch task, so that one claim can fill it.
        self.claim_max = max(
            [self.settings.claim_batch, *(t.options.batch_size or 0 for t in batch_tasks.values())]
        )
        #: In burst mode, how long an empty claim may wait on a rate limit's window.
        self._rate_window = max(
            (r.period for r in (*self.rate_limited.values(), *self.key_rate_limited.values())),
            default=0.0,
        )
        #: In burst mode, how long claims must come back empty before the burst
        #: ends. With RabbitMQ dispatch a claim skips a job whose row a relay is
        #: marking dispatched at that moment (SKIP LOCKED): one empty claim
        #: proves nothing for the length of that UPDATE.
        self._empty_for = DISPATCH_GRACE if self.settings.dispatch else 0.0
        self.prefetcher = Prefetch(
            prefetch if prefetch is not None else self.settings.prefetch,
            self.concurrency,
            # Buffered jobs hold their key's slots: no bigger buffer than asked.
            rate_limited=bool(self.rate_limited or self.key_capped or self.key_rate_limited),
        )
        #: Direct handoff (backends that support it): decided in run().
        self.hands_off = False
        self.handoffs: HandoffReceiver | None = None
        #: The shutdown gave the buffer back: jobs handed off later are released.
        self.buffer_given_back = False
        self._read_jobs: Callable[[Sequence[str]], Awaitable[list[Job]]] | None = None
        #: The claim loop's wait for work; RabbitMQ dispatch puts its consumer's here.
        self.wait_for_work: WaitForWork | None = None
        #: RabbitMQ dispatch's roles in this worker (``settings.dispatch``), while running.
        self.dispatcher: Dispatcher | None = None
        #: With ``max_worker_rss``: the watch; ``memory.exceeded`` once it stopped the worker.
        self.memory: MemoryWatch | None = None
        #: Claims sent so far (the loop's and those sent with outcomes), and the
        #: number of the last one that came back short, and when.
        self._claims_sent = 0
        self._short_claim = 0
        self._settle_claim_number = 0
        self._short_claim_at = 0.0
        #: The claim loop waits for work after a short claim: outcomes flushed
        #: meanwhile claim for it (settle_and_claim); one such claim at a time.
        self._waiting_for_work = False
        #: Set while no claim sent with outcomes is on its way (one at a time).
        self._settle_claim_answered = asyncio.Event()
        self._settle_claim_answered.set()

    @property
    def prefetch(self) -> int:
        """How many claimed jobs the worker holds beyond its slots now (prefetch.py)."""
        return self.prefetcher.size

    # -- control ----------------------------------------------------------------
    def stop(self, force: bool = False) -> None:
        """Begin the graceful shutdown; ``force`` skips waiting for running jobs."""
        self.stopping = True
        self._wake.set()
        self.slot_free.set()
        if force:
            self.forced.set()

    def wake(self) -> None:
        """Claim again now (a local enqueue, resume or retry happened)."""
        self._wake.set()

    def _use_wait(self, wait: WaitForWork) -> None:
        """Dispatch's consumer is attached: its deliveries wake the claim loop."""
        self.wait_for_work = wait
        self.wake()

    def request_cancel(self, job_id: str) -> None:
        """Signal a running job to stop; force-cancel it after ``cancel_grace``.

        A buffered job never starts: it is settled ``cancelled`` at once.
        """
        waiting = self.buffered.pop(job_id, None)
        if waiting is not None:
            waiting.stop_reason = "cancel"
            self._settle_unstarted(waiting, Outcome.CANCEL)
            return
        run = self.active.get(job_id)
        if run is None or run.stop_reason is not None:
            return
        run.stop_reason = "cancel"
        run.ctx.mark_cancelled()
        if self._loop is not None:
            run.force_handle = self._loop.call_later(
                self.settings.cancel_grace, lambda: run.interrupt("cancel")
            )

    # -- the run ----------------------------------------------------------------
    async def run(self) -> None:
        """Run until stopped (or, in burst mode, until nothing is due)."""
        runtime = self.runtime
        backend = await runtime.connect()
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.started_at = await backend.now()
        self._read_jobs = backend.get_jobs  # for ctx.dependency_results
        self.executor = BatchExecutor(runtime, self.id, threads=self.concurrency)
        reports = SettleReports(runtime.events)
        watch = WorkflowWatch(backend, runtime.events)
        self.acker = Acker(
            backend,
            reports.refused,
            reports.circuits,
            reports.cancelled,
            watch.settled,
            events=runtime.events,
            # RabbitMQ dispatch delivers work by its own consumer: no claims there.
            claimer=None if self.settings.dispatch else self,
        )
        self.leases = LeaseKeeper(
            backend,
            self.id,
            (self.active, self.buffered),
            self.settings.lease,
            self.request_cancel,
            events=runtime.events,
            unsettled=self.acker.unsettled,
        )
        self.stats = StatsReporter(backend, self.settings.stats_flush_interval)
        faults.install(self)  # test-only fault injection; nothing unless asked for
        runtime.local_workers.attach(self)
        if self.settings.dispatch:
            from conveyor.dispatch import start_worker_dispatch

            self.dispatcher = await start_worker_dispatch(
                self.settings.dispatch,
                backend,
                worker_queue_ttl=self.settings.worker_queue_ttl,
                events=runtime.events,
                queues=self.queues,
                # Bounded by the slots plus what the worker may hold ahead of them.
                prefetch=self.concurrency + self.prefetch,
                use_wait=self._use_wait,
            )
        if self.install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(sig, on_signal, self, sig)
        try:
            await start_side_roles(self, backend)
            runtime.events.emit("worker_started", worker_id=self.id)
            logger.info(
                "worker %s started: queues %s, concurrency %d, prefetch %d, loop %s",
                self.id,
                ",".join(self.queues),
                self.concurrency,
                self.prefetch,
                loop_name(),
            )
            await self._claim_loop()
        finally:
            await shut_down(self)
            if self.dispatcher is not None:
                await self.dispatcher.close()
            if self.install_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    self._loop.remove_signal_handler(sig)
            runtime.local_workers.detach(self)
        if self.roles.crash is not None:
            raise WorkerCrashed(f"worker {self.id} stopped: a side role died") from self.roles.crash

    def describe(self) -> WorkerInfo:
        return WorkerInfo(
            id=self.id,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=self.queues,
            concurrency=self.concurrency,
            active=len(self.active),
            started_at=self.started_at,
            heartbeat_interval=self.settings.heartbeat_interval,
        )

    # -- claiming -----------------------------------------------------------------
    async def _rate_held_back(self) -> bool:
        """Whether jobs of a rate-limited task wait in this worker's queues: a
        burst waits for their window to slide only then, not a whole window
        (a minute, for "2/m") after every burst."""
        for queue in self.queues:
            for task in (*self.rate_limited, *self.key_rate_limited):
                held = JobFilter(states=[JobState.WAITING], queue=queue, task=task)
                if await self.runtime.backend.count_jobs(held):
                    return True
        return False

    def _claim_request(self, limit: int) -> ClaimRequest:
        task_limits = {
            name: max(0, cap - self.running_by_task.get(name, 0))
            for name, cap in self.capped.items()
        }
        return ClaimRequest(
            worker_id=self.id,
            queues=self.queues,
            limit=limit,
            lease=self.settings.lease,
            task_limits=task_limits,
            rate_limits=self.rate_limited,
            key_limits=self.key_capped,
            key_rate_limits=self.key_rate_limited,
            # Outlives the poll interval: an idle worker claims (and so
            # registers again) at least that often.
            handoff_for=self.settings.poll_interval + 1.0 if self.hands_off else 0.0,
        )

    async def _claim_loop(self) -> None:
        backend = self.runtime.backend
        batch_max = self.claim_max
        failures = 0
        last_claimed = time.monotonic()
        empty_since: float | None = None  # the first of the empty claims in a row
        while not self.stopping:
            # Refill the buffer in chunks, not one job per finished job: small
            # claims cost as much as big ones. Idle slots are always filled at once.
            refill_at = max(1, self.prefetch // 2)
            free = self.slots + self.room + self.prefetch - len(self.active) - len(self.buffered)
            if free <= 0 or (free < refill_at and len(self.active) >= self.slots):
                self.slot_free.clear()
                await self.slot_free.wait()  # stop() sets it too; no helper tasks here
                continue
            limit = min(free, batch_max)
            self._wake.clear()
            sent_at = time.monotonic()  # the lease starts no earlier than this
            # A burst does not end on an empty claim sent while a job ran (it may
            # have enqueued work the claim could not see) or while an outcome was
            # unstored (its retry may be due at once).
            busy_at_send = self.burst and (
                bool(self.active or self.buffered) or not self.acker.idle
            )
            try:
                result = await backend.claim_jobs(self._claim_request(limit))
                failures = 0
            except (BackendError, OSError) as exc:
                failures += 1
                delay = min(0.05 * 2**failures, 5.0)
                logger.warning("claim failed (retrying in %.2fs): %s", delay, exc)
                await self._wait_for(asyncio.sleep(delay), None)
                continue
            self._claims_sent += 1
            self._claimed(result, limit, sent_at, self._claims_sent)
            if len(result.jobs) >= limit:
                await asyncio.sleep(0)  # let the batch start before claiming more
                continue
            if result.jobs:
                last_claimed = time.monotonic()
                empty_since = None
            elif self.burst:
                if not self.active and not self.buffered:
                    if busy_at_send:
                        empty_since = None
                        await self.acker.drain(self.settings.shutdown_timeout)
                        continue
                    # Due jobs held back by a rate limit are still due: wait for
                    # the window to slide, but give up after one idle window,
                    # counted to when this empty claim was sent (on a loaded
                    # host it may come back after the window slid, unseen).
                    now = time.monotonic()
                    empty_since = empty_since if empty_since is not None else now
                    if now - empty_since >= self._empty_for and (
                        sent_at - last_claimed > self._rate_window
                        or not await self._rate_held_back()
                    ):
                        break
                    await self._wait_for(asyncio.sleep(0.02), None)
                    continue
                self.slot_free.clear()
                await self.slot_free.wait()
                continue
            # Fewer than asked: wait for new work, a free slot, or the poll timer.
            poll = self.settings.poll_interval
            if self.rate_limited or self.key_rate_limited:
                poll = min(poll, 0.05)
            elif self.key_capped:
                # A slot freed by another worker sends no wake-up.
                poll = min(poll, KEY_SLOT_POLL)
            await self._wait_for_work(backend.wait_for_work, poll)

    async def _wait_for_work(self, store_wait: WaitForWork, poll: float) -> None:
        """After a short claim: until new work may be due (a wake-up, a freed slot,
        the poll timer). Outcomes flushed meanwhile claim for this worker
        (:meth:`claim_with_settle`); a wake-up that such a claim, sent after it,
        already answered (it came back short) is slept through."""
        self._waiting_for_work = True
        try:
            while not self.stopping:
                if self.burst and not self.active and not self.buffered:
                    # Nothing held: the burst's own claim decides whether it ends
                    # (its empty-claim rules), not a poll interval of waiting.
                    return
                self.slot_free.clear()
                wait = self.wait_for_work or store_wait
                await self._wait_for(wait(self.queues, poll), self.slot_free.wait())
                woken_after = self._claims_sent
                # Whatever woke us (a freed slot; a wake-up, which may be the
                # store's echo of a release this worker already claimed): a claim
                # sent while an outcome of ours is on its way races the settle
                # that may release its dependents (a chain's next step). Sent once
                # the settle is answered, it takes what the settle released --
                # and the settle itself claims while we wait here. A local wake-up
                # or stop() does not wait, nor anything past the poll interval (a
                # settle the store keeps failing must not stop the claims).
                if self.acker.answered and self._echo_likely():
                    # Most likely the echo of the release our last outcomes
                    # claimed: the job that runs now claims with its outcome.
                    left = ECHO_WINDOW - (time.monotonic() - self._short_claim_at)
                    self.slot_free.clear()
                    await self._wait_for(self.slot_free.wait(), asyncio.sleep(left))
                if not self.acker.answered:
                    await self._wait_for(self.acker.stored(), asyncio.sleep(poll))
                if self._settle_claim_in_flight:  # sent with later outcomes: its answer
                    await self._wait_for(self._settle_claim_answered.wait(), asyncio.sleep(poll))
                if not self._settle_claim_in_flight and self._short_claim <= woken_after:
                    return  # no claim sent since the wake-up has answered it: claim
                # A claim sent after the wake-up came back short (it saw what
                # woke us), or one is on its way with outcomes (its answer
                # wakes us if it comes back full or fails): wait again.
        finally:
            self._waiting_for_work = False

    @property
    def _settle_claim_in_flight(self) -> bool:
        return not self._settle_claim_answered.is_set()

    def _echo_likely(self) -> bool:
        """A wake-up now: is it most likely the store's echo of the outcomes whose
        claim came back short just before (a job runs, no other claim since)?"""
        return (
            bool(self.active)
            and self._short_claim == self._claims_sent
            and time.monotonic() - self._short_claim_at < ECHO_WINDOW
        )

    def claim_with_settle(self) -> ClaimRequest | None:
        """The claim the acker's next flush sends with its outcomes: while the claim
        loop waits for work, one at a time, for the free slots."""
        if not self._waiting_for_work or self._settle_claim_in_flight or self.stopping:
            return None
        free = self.slots + self.room + self.prefetch - len(self.active) - len(self.buffered)
        if free <= 0:
            return None
        self._settle_claim_answered.clear()
        self._claims_sent += 1
        self._settle_claim_number = self._claims_sent
        return self._claim_request(min(free, self.claim_max))

    def claimed_with_settle(
        self, request: ClaimRequest, result: ClaimResult | None, sent_at: float
    ) -> None:
        """The answer of a claim sent with outcomes (``None``: it failed)."""
        self._settle_claim_answered.set()
        if result is None:
            self._wake.set()  # the loop claims by itself
            return
        self._claimed(result, request.limit, sent_at, self._settle_claim_number)
        if len(result.jobs) >= request.limit:
            self._wake.set()  # more may be due: the loop claims again

    def _claimed(self, result: ClaimResult, limit: int, sent_at: float, number: int) -> None:
        """The answer of claim number ``number`` (``limit`` asked, sent at ``sent_at``)."""
        took = time.monotonic() - sent_at
        full = len(result.jobs) >= limit
        if not full and number > self._short_claim:
            self._short_claim = number
            self._short_claim_at = time.monotonic()
        self.prefetcher.after_claim(took, full)
        if self.runtime.events.has("claimed"):
            self.runtime.events.emit(
                "claimed", worker_id=self.id, count=len(result.jobs), seconds=took
            )
        self.take(result, sent_at)
        if self._batcher is not None:
            self._batcher.claimed(full)

    def take(self, result: ClaimResult, sent_at: float) -> None:
        """A claim's (or a handoff's) outcome; their leases started at ``sent_at``."""
        for job in result.expired:
            self.stats.add(job.task, job.queue, "expired", 0.0)
            self.runtime.events.emit("expired", job=job)
            self.runtime.events.emit("dead", job=job, reason="expired", error=job.error)
        if not result.jobs:
            return
        deadline = self.leases.trusted_until(sent_at)
        if self.buffer_given_back or deadline <= time.monotonic():
            # Handed off too late to hold: the buffer was already given back
            # (shutdown), or the handoff waited past the lease's trusted part.
            # Released, fenced by the lease token like any outcome.
            for job in result.jobs:
                self.acker.add(
                    Settlement(job.id, job.lease_token or "", Outcome.RELEASE, job.task), job
                )
            return
        for job in result.jobs:
            self._hold(job, deadline)

    async def _wait_for(
        self, first: Coroutine[Any, Any, Any], second: Coroutine[Any, Any, Any] | None
    ) -> None:
        """Wait for ``first`` (or ``second``), or a wake-up/stop, whichever comes first."""
        waiters = {asyncio.ensure_future(first), asyncio.ensure_future(self._wake.wait())}
        if second is not None:
            waiters.add(asyncio.ensure_future(second))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def _hold(self, job: Job, lease_deadline: float) -> None:
        """A claimed job: start it in a free slot, or buffer it (prefetch)."""
        if self._batcher is not None and self._batcher.hold(job, lease_deadline):
            return
        job.bind(self.runtime)
        ctx = JobContext(job, self.id, self.on_progress, self._read_jobs)
        run = Running(job, ctx, lease_deadline=lease_deadline)
        self.running_by_task[job.task] = self.running_by_task.get(job.task, 0) + 1
        if len(self.active) < self.slots and not self.stopping:
            self._start(run)
        else:
            self.buffered[job.id] = run
            self.next_up.append(run)

    def start_buffered(self) -> None:
        """Fill free slots from the buffer; jobs whose lease was lost are dropped."""
        while self.next_up and len(self.active) < self.slots:
            run = self.next_up.popleft()
            if self.buffered.pop(run.job.id, None) is None:
                continue  # cancelled (and settled) while buffered
            if run.stop_reason is not None:  # lease lost while buffered: not ours to run
                self._forget(run)
                continue
            self._start(run)

    def release_buffered(self) -> None:
        """Give every buffered job back at once (the worker stopped claiming)."""
        runs = [run for run in self.next_up if run.job.id in self.buffered]
        self.next_up.clear()
        self.buffered.clear()
        for run in runs:
            if run.stop_reason is None:
                self._settle_unstarted(run, Outcome.RELEASE)
            else:
                self._forget(run)
        if runs:
            logger.info("released %d prefetched job(s) back to waiting", len(runs))

    def _settle_unstarted(self, run: Running, outcome: Outcome) -> None:
        job = run.job
        if outcome is Outcome.CANCEL and self.runtime.events.has("cancelled"):
            self.runtime.events.emit("cancelled", job=job)
        self.acker.add(Settlement(job.id, job.lease_token or "", outcome, job.task), job)
        self._forget(run)

    def _forget(self, run: Running) -> None:
        self.running_by_task[run.job.task] -= 1
        self.slot_free.set()

    def _start(self, run: Running) -> None:
        if self._batcher is not None and self._batcher.take(run):
            return
        self.active[run.job.id] = run
        task = asyncio.create_task(self._execute(run))
        run.task = task
        self.executing.add(task)
        task.add_done_callback(self.executing.discard)

    async def _execute(self, run: Running) -> None:
        job = run.job
        started = time.perf_counter()
        try:
            settlement = await self.executor.execute(run)
            if settlement is not None:
                outcome = settlement.outcome
                if outcome is Outcome.COMPLETE:
                    self.prefetcher.completed()
                elif outcome is Outcome.RELEASE:
                    self.released += 1
                self.acker.add(settlement, job)
                duration = time.perf_counter() - started
                self.stats.add_outcome(job.task, job.queue, outcome, duration)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in conveyor itself: leave the job to the stall reaper
            logger.exception("internal error while running job %s", job.id)
            self.runtime.events.emit("error", error=exc, where="executor")
        finally:
            if run.force_handle is not None:
                run.force_handle.cancel()
            del self.active[job.id]
            self.running_by_task[job.task] -= 1
            self.processed += 1
            if self.next_up and not self.stopping:
                self.start_buffered()
            self.slot_free.set()

    def on_progress(self, job: Job, report: dict[str, Any], encoded: bytes) -> None:
        if threading.get_ident() != self._loop_thread and self._loop is not None:
            self._loop.call_soon_threadsafe(self.on_progress, job, report, encoded)
            return
        run = self.active.get(job.id)
        if run is None:
            return
        run.unsaved_progress = encoded
        if self.runtime.events.has("progress"):
            self.runtime.events.emit("progress", job=job, progress=report)

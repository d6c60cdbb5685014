"""The memory backend: a real backend whose store is a set of Python dicts.

``memory://`` gives a fresh private store; ``memory://NAME`` shares one store per
NAME within the process, so a producer app and a worker app in one test see the
same jobs. Nothing survives the process.

Atomicity: every operation is a coroutine that never awaits while it reads or
changes the store, and holds the store's lock while it does (so a store shared
with another thread, e.g. ``enqueue_sync``, stays consistent too).

Indexes kept beside the ``jobs`` dict, all with lazy deletion (an entry carries
the row's ``seq`` and is dropped when it no longer matches the row):

- ``waiting[queue][task]``: a heap of ``(-priority, run_at, id, seq)``, so a claim
  merges the heads of the (queue, task) heaps it may take from and never scans
  the jobs of a blocked task (open circuit, rate limit, task cap);
- ``delayed``: a heap of ``(run_at, id, seq)`` for promotion inside the claim;
- ``expiring``: a heap of ``(expires_at, id, seq)`` of waiting jobs with a TTL;
- ``by_state`` and ``counts[queue][state]``, maintained on every state change.
"""

from __future__ import annotations

import asyncio
import heapq
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from conveyor.backends.base import (
    Backend,
    CircuitInfo,
    CircuitPolicy,
    CircuitState,
    ClaimRequest,
    ClaimResult,
    JobFilter,
    JobStat,
    NewJob,
    Outcome,
    PruneRule,
    QueueInfo,
    RenewResult,
    ScheduleRecord,
    ScheduleSpec,
    Settlement,
    SettleResult,
    StallResult,
    WorkerInfo,
    earlier_retry,
)
from conveyor.backends.memory.schedules import ScheduleTable
from conveyor.backends.memory.stats import JobStatTable
from conveyor.backends.rows import decode_fields
from conveyor.backends.worksignal import PendingQueues
from conveyor.errors import (
    BackendError,
    BackendUnavailable,
    ConfigurationError,
    InvalidStateError,
    JobNotFound,
    QueueFull,
)
from conveyor.ids import new_token
from conveyor.job import TERMINAL_STATES, ErrorInfo, FailureReason, Job, JobState
from conveyor.settings import Settings

_UNLIMITED = sys.maxsize
#: Margin added to a timer wake-up so that the claim after it sees the job as due.
_TIMER_SLACK = 0.002

_WaitEntry = tuple[int, float, str, int]  # (-priority, run_at, id, seq)
_TimeEntry = tuple[float, str, int]  # (time, id, seq)


@dataclass(slots=True)
class _Row:
    """One stored job. JSON columns stay the encoded bytes they were given."""

    id: str
    task: str
    queue: str
    payload: bytes
    state: JobState
    priority: int
    max_attempts: int
    timeout: float | None
    run_at: float
    created_at: float
    ttl: float | None
    """The effective TTL (the smaller of the job's and its queue's at enqueue):
    every wait in ``waiting`` gets it afresh (``expires_at`` is re-set)."""
    expires_at: float | None
    idempotency_key: str | None
    tenant: str | None
    metadata: bytes | None
    retry_of: str | None
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    lease_until: float | None = None
    lease_token: str | None = None
    worker_id: str | None = None
    stalls: int = 0
    progress: bytes | None = None
    result: bytes | None = None
    errors: tuple[ErrorInfo, ...] = ()
    """Error history; a tuple, so that most rows hold no container of their own."""
    failure_reason: FailureReason | None = None
    retried_as: str | None = None
    cancel_requested: bool = False
    seq: int = 0
    """Bumped each time the row enters waiting or delayed; index entries carry it."""


@dataclass(slots=True)
class _Key:
    """An idempotency key; it outlives its job's row until ``expires_at``."""

    name: str
    job_id: str
    task: str
    queue: str
    expires_at: float
    state: JobState | None = None
    """The state the job had when its row was deleted (``None`` while it exists)."""


@dataclass(slots=True)
class _Circuit:
    state: CircuitState = CircuitState.CLOSED
    failures: int = 0
    open_until: float | None = None
    open_for: float = 0.0
    """From the last failure's policy: how long a failed trial re-opens it."""


@dataclass(slots=True)
class _RateLog:
    """Start times of a rate-limited task (a sliding log)."""

    period: float
    starts: deque[float] = field(default_factory=deque)

    def trim(self, now: float, period: float) -> None:
        floor = now - period
        while self.starts and self.starts[0] <= floor:
            self.starts.popleft()


def _copy_error(error: ErrorInfo) -> ErrorInfo:
    return replace(error)


def _to_job(row: _Row, duplicate: bool = False) -> Job:
    """A fresh :class:`Job` built from ``row``: nothing in it aliases the store."""
    fields = decode_fields(row.payload, row.metadata, row.result, row.progress)
    errors = [_copy_error(e) for e in row.errors]
    return Job(
        id=row.id,
        task=row.task,
        queue=row.queue,
        payload=fields.payload,
        state=row.state,
        priority=row.priority,
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        timeout=row.timeout,
        run_at=row.run_at,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        expires_at=row.expires_at,
        ttl=row.ttl,
        lease_until=row.lease_until,
        lease_token=row.lease_token,
        worker_id=row.worker_id,
        stalls=row.stalls,
        progress=fields.progress,
        result=fields.result,
        error=errors[-1] if errors else None,
        errors=errors,
        failure_reason=row.failure_reason,
        idempotency_key=row.idempotency_key,
        tenant=row.tenant,
        metadata=fields.metadata,
        retried_as=row.retried_as,
        retry_of=row.retry_of,
        cancel_requested=row.cancel_requested,
        duplicate=duplicate,
        decode_error=fields.problem,
    )


def _matches(row: _Row, where: JobFilter) -> bool:
    if where.states is not None and row.state not in where.states:
        return False
    if where.queue is not None and row.queue != where.queue:
        return False
    if where.task is not None and row.task != where.task:
        return False
    if where.tenant is not None and row.tenant != where.tenant:
        return False
    if where.failure_reason is not None and row.failure_reason is not where.failure_reason:
        return False
    if where.idempotency_key is not None and row.idempotency_key != where.idempotency_key:
        return False
    return where.finished_before is None or (
        row.finished_at is not None and row.finished_at < where.finished_before
    )


def _deadline(start: float, ttl: float | None) -> float | None:
    """``expires_at`` of a wait that starts at ``start``: each wait gets the whole TTL."""
    return None if ttl is None else start + ttl


def _wake(future: asyncio.Future[bool], work: bool) -> None:
    if not future.done():
        future.set_result(work)


class _Store:
    """Everything one store holds. Callers hold ``lock`` around every method."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last_now = 0.0
        self.jobs: dict[str, _Row] = {}
        self.by_state: dict[JobState, set[str]] = {state: set() for state in JobState}
        self.counts: dict[str, dict[JobState, int]] = {}
        self.waiting: dict[str, dict[str, list[_WaitEntry]]] = {}
        self.delayed: list[_TimeEntry] = []
        self.expiring: list[_TimeEntry] = []
        self.keys: dict[str, _Key] = {}
        self.queues: dict[str, QueueInfo] = {}
        self.circuits: dict[str, _Circuit] = {}
        self.rates: dict[str, _RateLog] = {}
        self.workers: dict[str, WorkerInfo] = {}
        self.waiters: dict[asyncio.Future[bool], frozenset[str]] = {}
        # Queues notified while no waiter on them was listening: a worker between
        # an empty claim and its next wait must not sleep through that work.
        self.pending = PendingQueues()
        self.job_stats = JobStatTable()
        self.schedules = ScheduleTable()

    # -- clock -------------------------------------------------------------
    def now(self) -> float:
        """Host clock, never going backwards for this store."""
        now = time.time()
        if now < self.last_now:
            return self.last_now
        self.last_now = now
        return now

    # -- rows and indexes --------------------------------------------------
    def _index(self, row: _Row) -> None:
        """Add index entries for the state ``row`` just entered."""
        if row.state is JobState.WAITING:
            row.seq += 1
            by_task = self.waiting.setdefault(row.queue, {})
            heap = by_task.setdefault(row.task, [])
            heapq.heappush(heap, (-row.priority, row.run_at, row.id, row.seq))
            if row.expires_at is not None:
                heapq.heappush(self.expiring, (row.expires_at, row.id, row.seq))
        elif row.state is JobState.DELAYED:
            row.seq += 1
            heapq.heappush(self.delayed, (row.run_at, row.id, row.seq))

    def _insert(self, row: _Row) -> None:
        self.jobs[row.id] = row
        self.by_state[row.state].add(row.id)
        counts = self.counts.setdefault(row.queue, dict.fromkeys(JobState, 0))
        counts[row.state] += 1
        self._index(row)

    def _move(self, row: _Row, state: JobState) -> None:
        old = row.state
        if old is not state:
            self.by_state[old].discard(row.id)
            self.by_state[state].add(row.id)
            counts = self.counts[row.queue]
            counts[old] -= 1
            counts[state] += 1
            row.state = state
        self._index(row)

    def _remove(self, row: _Row) -> None:
        del self.jobs[row.id]
        self.by_state[row.state].discard(row.id)
        self.counts[row.queue][row.state] -= 1
        if row.idempotency_key is not None:
            key = self.keys.get(row.idempotency_key)
            if key is not None and key.job_id == row.id:
                key.state = row.state

    def _live(self, entry_id: str, seq: int, state: JobState) -> _Row | None:
        row = self.jobs.get(entry_id)
        if row is None or row.state is not state or row.seq != seq:
            return None
        return row

    def _clean_waiting(self, heap: list[_WaitEntry]) -> None:
        while heap and self._live(heap[0][2], heap[0][3], JobState.WAITING) is None:
            heapq.heappop(heap)

    def _queue_ttl(self, queue: str) -> float | None:
        info = self.queues.get(queue)
        return info.ttl if info is not None else None

    def _effective_ttl(self, job_ttl: float | None, queue: str) -> float | None:
        """The smaller of the job's TTL and its queue's, fixed at enqueue."""
        queue_ttl = self._queue_ttl(queue)
        if queue_ttl is None:
            return job_ttl
        return queue_ttl if job_ttl is None else min(job_ttl, queue_ttl)

    def _pending(self, queue: str) -> int:
        counts = self.counts.get(queue)
        if counts is None:
            return 0
        return counts[JobState.WAITING] + counts[JobState.DELAYED]

    # -- notifications -----------------------------------------------------
    def notify(
        self, queues: Iterable[str] = (), *, everyone: bool = False, timer: bool = False
    ) -> None:
        """Wake waiters on ``queues`` (or all); ``timer`` makes the others re-check
        when the next delayed job is due."""
        wanted = set(queues)
        if not (wanted or everyone or timer):
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        unheard = set(wanted)
        for future, listening in list(self.waiters.items()):
            if future.done():
                continue
            work = everyone or not listening.isdisjoint(wanted)
            if not (work or timer):
                continue
            loop = future.get_loop()
            if loop.is_closed():
                self.waiters.pop(future, None)
                continue
            if work:
                unheard -= listening
            if loop is running:
                _wake(future, work)
            else:
                loop.call_soon_threadsafe(_wake, future, work)
        if not everyone:
            self.pending.add(unheard)

    def next_due(self) -> float | None:
        while (
            self.delayed
            and self._live(self.delayed[0][1], self.delayed[0][2], JobState.DELAYED) is None
        ):
            heapq.heappop(self.delayed)
        return self.delayed[0][0] if self.delayed else None

    # -- enqueue -----------------------------------------------------------
    def enqueue(self, jobs: Sequence[NewJob]) -> list[Job]:
        now = self.now()
        plan: list[tuple[_Row, bool] | _Key] = []  # (row, is_new) or a remembered key
        in_batch: dict[str, _Row] = {}
        new_ids: set[str] = set()
        added: dict[str, int] = {}
        for new in jobs:
            key = new.idempotency_key
            if key is not None:
                if key in in_batch:
                    plan.append((in_batch[key], False))
                    continue
                known = self.keys.get(key)
                if known is not None and now < known.expires_at:
                    existing = self.jobs.get(known.job_id)
                    plan.append((existing, False) if existing is not None else known)
                    continue
            if new.id in self.jobs or new.id in new_ids:
                raise BackendError(f"a job with id {new.id!r} already exists")
            new_ids.add(new.id)
            run_at = new.run_at if new.run_at is not None else now + new.delay
            ttl = self._effective_ttl(new.ttl, new.queue)
            row = _Row(
                id=new.id,
                task=new.task,
                queue=new.queue,
                payload=bytes(new.payload),
                state=JobState.DELAYED if run_at > now else JobState.WAITING,
                priority=new.priority,
                max_attempts=new.max_attempts,
                timeout=new.timeout,
                run_at=run_at,
                created_at=now,
                ttl=ttl,
                expires_at=_deadline(run_at, ttl),
                idempotency_key=key,
                tenant=new.tenant,
                metadata=bytes(new.metadata) if new.metadata is not None else None,
                retry_of=new.retry_of,
            )
            plan.append((row, True))
            added[new.queue] = added.get(new.queue, 0) + 1
            if key is not None:
                in_batch[key] = row
        for queue, count in added.items():
            info = self.queues.get(queue)
            if (
                info is not None
                and info.max_size is not None
                and (self._pending(queue) + count > info.max_size)
            ):
                raise QueueFull(queue, info.max_size)
        # Validated: from here on nothing can fail, so the batch is all or nothing.
        ttl_of = {new.id: new.idempotency_ttl for new in jobs}
        woken: set[str] = set()
        timer = False
        for item in plan:
            if isinstance(item, tuple) and item[1]:
                row = item[0]
                self._insert(row)
                if row.idempotency_key is not None:
                    self.keys[row.idempotency_key] = _Key(
                        row.idempotency_key, row.id, row.task, row.queue, now + ttl_of[row.id]
                    )
                if row.state is JobState.WAITING:
                    woken.add(row.queue)
                else:
                    timer = True
        self.notify(woken, timer=timer)
        out: list[Job] = []
        for item in plan:
            if isinstance(item, _Key):
                out.append(
                    Job(
                        id=item.job_id,
                        task=item.task,
                        queue=item.queue,
                        state=item.state or JobState.COMPLETED,
                        idempotency_key=item.name,
                        duplicate=True,
                    )
                )
            else:
                out.append(_to_job(item[0], duplicate=not item[1]))
        return out

    # -- claim -------------------------------------------------------------
    def _promote_and_expire(self, now: float) -> list[Job]:
        while self.delayed and self.delayed[0][0] <= now:
            _, job_id, seq = heapq.heappop(self.delayed)
            row = self._live(job_id, seq, JobState.DELAYED)
            if row is not None:
                self._move(row, JobState.WAITING)
        expired: list[Job] = []
        while self.expiring and self.expiring[0][0] <= now:
            _, job_id, seq = heapq.heappop(self.expiring)
            row = self._live(job_id, seq, JobState.WAITING)
            if row is None:
                continue
            row.failure_reason = FailureReason.EXPIRED
            row.finished_at = now
            row.errors += (
                ErrorInfo(
                    type="Expired",
                    message="queue TTL expired",
                    attempt=row.attempts,
                    reason=FailureReason.EXPIRED.value,
                    at=now,
                ),
            )
            self._move(row, JobState.FAILED)
            expired.append(_to_job(row))
        return expired

    def _task_budget(self, task: str, request: ClaimRequest, now: float) -> tuple[int, bool]:
        """How many jobs of ``task`` this claim may take, and whether the first
        one is a half-open circuit's trial."""
        budget = request.task_limits.get(task, _UNLIMITED)
        trial = False
        if request.circuit_tasks:
            circuit = self.circuits.get(task)
            if circuit is not None and circuit.state is not CircuitState.CLOSED:
                if circuit.open_until is not None and circuit.open_until > now:
                    return 0, False
                budget = min(budget, 1)
                trial = True
        rate = request.rate_limits.get(task)
        if rate is not None:
            log = self.rates.get(task)
            if log is not None:
                log.trim(now, rate.period)
                budget = min(budget, max(0, rate.limit - len(log.starts)))
            else:
                budget = min(budget, rate.limit)
        return max(0, budget), trial

    def claim(self, request: ClaimRequest) -> ClaimResult:
        now = self.now()
        expired = self._promote_and_expire(now)
        claimed: list[Job] = []
        if request.limit <= 0:
            return ClaimResult(claimed, expired)
        budgets: dict[str, tuple[int, bool]] = {}
        heads: list[tuple[int, float, str, str, str]] = []  # (-prio, run_at, id, queue, task)
        for queue in dict.fromkeys(request.queues):
            info = self.queues.get(queue)
            if info is not None and info.paused:
                continue
            by_task = self.waiting.get(queue)
            if not by_task:
                continue
            for task, heap in list(by_task.items()):
                self._clean_waiting(heap)
                if not heap:
                    del by_task[task]
                    continue
                if task not in budgets:
                    budgets[task] = self._task_budget(task, request, now)
                if budgets[task][0] > 0:
                    neg_priority, run_at, job_id, _ = heap[0]
                    heads.append((neg_priority, run_at, job_id, queue, task))
        heapq.heapify(heads)
        token = new_token()
        while heads and len(claimed) < request.limit:
            _, _, _, queue, task = heapq.heappop(heads)
            left, trial = budgets[task]
            if left <= 0:
                continue
            heap = self.waiting[queue][task]
            _, _, job_id, _ = heapq.heappop(heap)
            row = self.jobs[job_id]
            row.attempts += 1
            row.lease_until = now + request.lease
            row.lease_token = token
            row.worker_id = request.worker_id
            row.started_at = now
            self._move(row, JobState.ACTIVE)
            claimed.append(_to_job(row))
            budgets[task] = (left - 1, False)
            if trial:
                circuit = self.circuits[task]
                circuit.state = CircuitState.HALF_OPEN
                circuit.open_until = now + circuit.open_for
            rate = request.rate_limits.get(task)
            if rate is not None:
                log = self.rates.setdefault(task, _RateLog(rate.period))
                log.period = max(log.period, rate.period)
                log.starts.append(now)
            self._clean_waiting(heap)
            if heap and left - 1 > 0:
                neg_priority, run_at, next_id, _ = heap[0]
                heapq.heappush(heads, (neg_priority, run_at, next_id, queue, task))
        return ClaimResult(claimed, expired)

    # -- leases and outcomes -----------------------------------------------
    def _held(self, job_id: str, token: str) -> _Row | None:
        row = self.jobs.get(job_id)
        if row is None or row.state is not JobState.ACTIVE or row.lease_token != token:
            return None
        return row

    def renew(self, leases: Sequence[tuple[str, str]], lease: float) -> RenewResult:
        now = self.now()
        out = RenewResult()
        for job_id, token in leases:
            row = self._held(job_id, token)
            if row is None:
                out.lost.add(job_id)
                continue
            row.lease_until = now + lease
            out.renewed.add(job_id)
            if row.cancel_requested:
                out.cancel_requested.add(job_id)
        return out

    def _count_run(
        self, task: str, policy: CircuitPolicy, success: bool, now: float
    ) -> CircuitInfo | None:
        circuit = self.circuits.get(task)
        if success:
            if circuit is None:
                return None
            changed = circuit.state is not CircuitState.CLOSED
            circuit.state = CircuitState.CLOSED
            circuit.failures = 0
            circuit.open_until = None
        else:
            if circuit is None:
                circuit = self.circuits[task] = _Circuit()
            circuit.failures += 1
            circuit.open_for = policy.open_for
            opens = circuit.state is CircuitState.HALF_OPEN or (
                circuit.state is CircuitState.CLOSED
                and policy.threshold > 0
                and circuit.failures >= policy.threshold
            )
            changed = opens
            if opens:
                circuit.state = CircuitState.OPEN
                circuit.open_until = now + policy.open_for
        if not changed:
            return None
        return CircuitInfo(task, circuit.state, circuit.failures, circuit.open_until)

    def settle(self, settlements: Sequence[Settlement]) -> SettleResult:
        now = self.now()
        out = SettleResult()
        woken: set[str] = set()
        timer = False
        for item in settlements:
            row = self._held(item.job_id, item.lease_token)
            if row is None:
                out.refused.add(item.job_id)
                continue
            row.lease_until = None
            row.lease_token = None
            if item.progress is not None:
                row.progress = bytes(item.progress)
            if item.error is not None and item.outcome is not Outcome.COMPLETE:
                row.errors += (_copy_error(item.error),)
            outcome = item.outcome
            if row.cancel_requested and outcome in (Outcome.RETRY, Outcome.RELEASE):
                # A pending cancel wins: the job would wait again, so it ends here.
                outcome = Outcome.CANCEL
                out.cancelled.add(item.job_id)
            if outcome is Outcome.COMPLETE:
                row.result = bytes(item.result) if item.result is not None else None
                row.finished_at = now
                self._move(row, JobState.COMPLETED)
            elif outcome is Outcome.RETRY:
                row.run_at = now + item.retry_delay
                row.expires_at = _deadline(row.run_at, row.ttl)
                row.worker_id = None
                self._move(row, JobState.DELAYED)
                timer = True
            elif outcome is Outcome.FAIL:
                row.failure_reason = item.failure_reason or FailureReason.ERROR
                row.finished_at = now
                self._move(row, JobState.FAILED)
            elif outcome is Outcome.CANCEL:
                row.finished_at = now
                self._move(row, JobState.CANCELLED)
            else:  # RELEASE: back in its place, the attempt given back, a fresh TTL
                row.attempts = max(0, row.attempts - 1)
                row.expires_at = _deadline(now, row.ttl)
                row.worker_id = None
                self._move(row, JobState.WAITING)
                woken.add(row.queue)
            # The circuit counts the run as the worker reported it (a failed run
            # is a failure even when a pending cancel ended the job).
            if item.circuit is not None and item.outcome in (
                Outcome.COMPLETE,
                Outcome.RETRY,
                Outcome.FAIL,
            ):
                success = item.outcome is Outcome.COMPLETE
                change = self._count_run(row.task, item.circuit, success, now)
                if change is not None:
                    out.circuit_changes.append(change)
        self.notify(woken, timer=timer)
        return out

    def save_progress(self, items: Sequence[tuple[str, str, bytes]]) -> set[str]:
        refused: set[str] = set()
        for job_id, token, progress in items:
            row = self._held(job_id, token)
            if row is None:
                refused.add(job_id)
            else:
                row.progress = bytes(progress)
        return refused

    # -- reads -------------------------------------------------------------
    def get(self, job_ids: Sequence[str]) -> list[Job]:
        out: list[Job] = []
        for job_id in dict.fromkeys(job_ids):
            row = self.jobs.get(job_id)
            if row is not None:
                out.append(_to_job(row))
        return out

    def _select(self, where: JobFilter) -> list[_Row]:
        if where.states is not None:
            ids: Iterable[str] = [i for s in dict.fromkeys(where.states) for i in self.by_state[s]]
            rows: Iterable[_Row] = (self.jobs[i] for i in ids)
        else:
            rows = self.jobs.values()
        return [row for row in rows if _matches(row, where)]

    def list_matching(self, where: JobFilter, limit: int, offset: int) -> list[Job]:
        rows = self._select(where)
        rows.sort(key=lambda r: r.id, reverse=True)  # ids increase with creation
        return [_to_job(r) for r in rows[max(0, offset) : max(0, offset) + max(0, limit)]]

    def count(self, where: JobFilter) -> int:
        return len(self._select(where))

    def known_queues(self) -> list[str]:
        names = set(self.queues)
        names.update(q for q, counts in self.counts.items() if any(counts.values()))
        return sorted(names)

    def queue_counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for queue in self.known_queues():
            counts = self.counts.get(queue)
            out[queue] = {s.value: (counts[s] if counts else 0) for s in JobState}
        return out

    def oldest_waiting(self) -> dict[str, float]:
        now = self.now()
        out: dict[str, float] = {}
        for job_id in self.by_state[JobState.WAITING]:
            row = self.jobs[job_id]
            if row.run_at <= now and (row.queue not in out or row.run_at < out[row.queue]):
                out[row.queue] = row.run_at
        return out

    # -- acting on jobs ----------------------------------------------------
    def cancel(self, job_id: str) -> Job | None:
        row = self.jobs.get(job_id)
        if row is None:
            return None
        if row.state in (JobState.WAITING, JobState.DELAYED):
            row.finished_at = self.now()
            self._move(row, JobState.CANCELLED)
        elif row.state is JobState.ACTIVE:
            row.cancel_requested = True
        return _to_job(row)

    def cancel_requests(self, job_ids: Sequence[str]) -> set[str]:
        out: set[str] = set()
        for job_id in job_ids:
            row = self.jobs.get(job_id)
            if row is not None and row.state is JobState.ACTIVE and row.cancel_requested:
                out.add(job_id)
        return out

    def retry_failed(self, job_id: str, new_id: str) -> Job:
        row = self.jobs.get(job_id)
        if row is None:
            raise JobNotFound(job_id)
        if row.state is not JobState.FAILED:
            raise InvalidStateError(f"job {job_id} is {row.state.value}, not failed")
        if row.retried_as is not None:
            earlier = self.jobs.get(row.retried_as)
            return earlier_retry(job_id, row.retried_as, [_to_job(earlier)] if earlier else [])
        if new_id in self.jobs:
            raise BackendError(f"a job with id {new_id!r} already exists")
        now = self.now()
        copy = _Row(
            id=new_id,
            task=row.task,
            queue=row.queue,
            payload=row.payload,
            state=JobState.WAITING,
            priority=row.priority,
            max_attempts=row.max_attempts,
            timeout=row.timeout,
            run_at=now,
            created_at=now,
            ttl=row.ttl,
            expires_at=_deadline(now, row.ttl),
            idempotency_key=None,
            tenant=row.tenant,
            metadata=row.metadata,
            retry_of=job_id,
        )
        self._insert(copy)
        row.retried_as = new_id
        self.notify([copy.queue])
        return _to_job(copy)

    def delete(self, job_ids: Sequence[str]) -> int:
        deleted = 0
        for job_id in dict.fromkeys(job_ids):
            row = self.jobs.get(job_id)
            if row is not None and row.state is not JobState.ACTIVE:
                self._remove(row)
                deleted += 1
        return deleted

    def purge(self, where: JobFilter) -> int:
        doomed = [row for row in self._select(where) if row.state is not JobState.ACTIVE]
        for row in doomed:
            self._remove(row)
        return len(doomed)

    # -- maintenance -------------------------------------------------------
    def recover_stalled(self, max_stalled: int) -> StallResult:
        now = self.now()
        out = StallResult()
        stalled = [
            row
            for row in (self.jobs[i] for i in self.by_state[JobState.ACTIVE])
            if row.lease_until is not None and row.lease_until < now
        ]
        stalled.sort(key=lambda r: (r.lease_until or 0.0, r.id))
        woken: set[str] = set()
        for row in stalled:
            row.errors += (
                ErrorInfo(
                    type="Stalled",
                    message="the job's lease expired: its worker died or stopped renewing",
                    attempt=row.attempts,
                    reason=FailureReason.STALLED.value,
                    at=now,
                ),
            )
            row.lease_until = None
            row.lease_token = None
            row.stalls += 1
            if row.cancel_requested:  # a pending cancel wins: never run again
                row.finished_at = now
                self._move(row, JobState.CANCELLED)
                out.cancelled.append(_to_job(row))
            elif row.attempts >= row.max_attempts or row.stalls > max_stalled:
                row.failure_reason = FailureReason.STALLED
                row.finished_at = now
                self._move(row, JobState.FAILED)
                out.failed.append(_to_job(row))
            else:
                row.worker_id = None
                row.expires_at = _deadline(now, row.ttl)
                self._move(row, JobState.WAITING)
                woken.add(row.queue)
                out.requeued.append(_to_job(row))
        self.notify(woken)
        return out

    def prune(self, rules: Sequence[PruneRule]) -> int:
        now = self.now()
        deleted = 0
        for rule in rules:
            if rule.state not in TERMINAL_STATES:
                continue
            excluded = set(rule.exclude_tasks)
            rows = [
                row
                for row in (self.jobs[i] for i in self.by_state[rule.state])
                if (row.task == rule.task if rule.task is not None else row.task not in excluded)
            ]
            doomed: dict[str, _Row] = {}
            if rule.max_age is not None:
                cutoff = now - rule.max_age
                for row in rows:
                    finished = row.finished_at if row.finished_at is not None else row.created_at
                    if finished < cutoff:
                        doomed[row.id] = row
            if rule.max_count is not None and len(rows) > rule.max_count:
                rows.sort(
                    key=lambda r: (
                        r.finished_at if r.finished_at is not None else r.created_at,
                        r.id,
                    ),
                    reverse=True,
                )
                for row in rows[max(0, rule.max_count) :]:
                    doomed[row.id] = row
            for row in doomed.values():
                self._remove(row)
            deleted += len(doomed)
        for name in [k for k, key in self.keys.items() if key.expires_at <= now]:
            del self.keys[name]
        for task in list(self.rates):
            log = self.rates[task]
            log.trim(now, log.period)
            if not log.starts:
                del self.rates[task]
        return deleted

    # -- queues, circuits, heartbeats --------------------------------------
    def configure_queue(self, name: str, max_size: int | None, ttl: float | None) -> None:
        info = self.queues.get(name)
        if info is None:
            self.queues[name] = QueueInfo(name, max_size=max_size, ttl=ttl)
        else:
            info.max_size = max_size
            info.ttl = ttl

    def set_paused(self, name: str, paused: bool) -> None:
        info = self.queues.setdefault(name, QueueInfo(name))
        info.paused = paused
        if not paused:
            self.notify([name])

    def list_queues(self) -> list[QueueInfo]:
        return [replace(self.queues.get(name) or QueueInfo(name)) for name in self.known_queues()]

    def list_circuits(self) -> list[CircuitInfo]:
        return [
            CircuitInfo(task, c.state, c.failures, c.open_until)
            for task, c in sorted(self.circuits.items())
        ]

    def reset_circuit(self, task: str) -> None:
        circuit = self.circuits.get(task)
        if circuit is not None:
            circuit.state = CircuitState.CLOSED
            circuit.failures = 0
            circuit.open_until = None
            self.notify(everyone=True)

    def record_heartbeat(self, worker: WorkerInfo) -> None:
        self.workers[worker.id] = replace(worker, queues=list(worker.queues), last_seen=self.now())

    def list_workers(self) -> list[WorkerInfo]:
        return [replace(w, queues=list(w.queues)) for _, w in sorted(self.workers.items())]

    def prune_workers(self, older_than: float) -> int:
        cutoff = self.now() - older_than
        gone = [wid for wid, w in self.workers.items() if w.last_seen < cutoff]
        for wid in gone:
            del self.workers[wid]
        return len(gone)


_STORES: dict[str, _Store] = {}
_STORES_LOCK = threading.Lock()


def _store_for(url: str) -> _Store:
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != "memory":
        raise ConfigurationError(f"url: {url!r} is not a memory:// URL")
    name = rest.split("?", 1)[0].strip("/")
    if not name:
        return _Store()
    with _STORES_LOCK:
        store = _STORES.get(name)
        if store is None:
            store = _STORES[name] = _Store()
        return store


def drop_memory_store(name: str) -> None:
    """Forget the shared store ``memory://NAME`` (open backends keep their data)."""
    with _STORES_LOCK:
        _STORES.pop(name, None)


class MemoryBackend(Backend):
    """Jobs in dicts, for tests and single-process apps; passes the conformance suite."""

    def __init__(self, url: str = "memory://", settings: Settings | None = None) -> None:
        self.url = url
        self.settings = settings
        self._store = _store_for(url)
        self._open = False

    def _ready(self) -> _Store:
        if not self._open:
            raise BackendUnavailable(f"{self.url}: the backend is not open")
        return self._store

    # -- lifecycle ---------------------------------------------------------
    async def open(self) -> None:
        self._open = True

    async def close(self) -> None:
        self._open = False

    async def now(self) -> float:
        store = self._ready()
        with store.lock:
            return store.now()

    async def ping(self) -> float:
        started = time.perf_counter()
        store = self._ready()
        with store.lock:
            pass
        return time.perf_counter() - started

    # -- jobs: the hot path ------------------------------------------------
    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        store = self._ready()
        with store.lock:
            return store.enqueue(jobs)

    async def claim_jobs(self, request: ClaimRequest) -> ClaimResult:
        store = self._ready()
        with store.lock:
            return store.claim(request)

    async def renew_leases(
        self, worker_id: str, leases: Sequence[tuple[str, str]], lease: float
    ) -> RenewResult:
        store = self._ready()
        with store.lock:
            return store.renew(leases, lease)

    async def settle_jobs(self, settlements: Sequence[Settlement]) -> SettleResult:
        store = self._ready()
        with store.lock:
            return store.settle(settlements)

    async def save_progress(self, items: Sequence[tuple[str, str, bytes]]) -> set[str]:
        store = self._ready()
        with store.lock:
            return store.save_progress(items)

    async def wait_for_work(
        self,
        queues: Sequence[str],
        timeout: float,
    ) -> None:
        store = self._ready()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        listening = frozenset(queues)
        while True:
            with store.lock:
                if store.pending.take(listening):
                    return
                remaining = deadline - loop.time()
                due = store.next_due()
                if due is not None:
                    remaining = min(remaining, due - store.now() + _TIMER_SLACK)
                if remaining <= 0:
                    return
                future: asyncio.Future[bool] = loop.create_future()
                store.waiters[future] = listening
            try:
                done, _ = await asyncio.wait({future}, timeout=remaining)
            finally:
                with store.lock:
                    store.waiters.pop(future, None)
                if not future.done():
                    future.cancel()
            if not done or future.result():
                return
            # A timer-only wake: the next delayed job may be due sooner; look again.

    # -- jobs: reading and acting ------------------------------------------
    async def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        store = self._ready()
        with store.lock:
            return store.get(job_ids)

    async def list_jobs(self, where: JobFilter, limit: int = 100, offset: int = 0) -> list[Job]:
        store = self._ready()
        with store.lock:
            return store.list_matching(where, limit, offset)

    async def count_jobs(self, where: JobFilter) -> int:
        store = self._ready()
        with store.lock:
            return store.count(where)

    async def cancel_job(self, job_id: str) -> Job | None:
        store = self._ready()
        with store.lock:
            return store.cancel(job_id)

    async def cancel_requests(self, job_ids: Sequence[str]) -> set[str]:
        store = self._ready()
        with store.lock:
            return store.cancel_requests(job_ids)

    async def retry_failed(self, job_id: str, new_id: str) -> Job:
        store = self._ready()
        with store.lock:
            return store.retry_failed(job_id, new_id)

    async def delete_jobs(self, job_ids: Sequence[str]) -> int:
        store = self._ready()
        with store.lock:
            return store.delete(job_ids)

    async def purge_jobs(self, where: JobFilter) -> int:
        store = self._ready()
        with store.lock:
            return store.purge(where)

    async def queue_counts(self) -> dict[str, dict[str, int]]:
        store = self._ready()
        with store.lock:
            return store.queue_counts()

    async def oldest_waiting(self) -> dict[str, float]:
        store = self._ready()
        with store.lock:
            return store.oldest_waiting()

    # -- maintenance -------------------------------------------------------
    async def recover_stalled(self, max_stalled: int) -> StallResult:
        store = self._ready()
        with store.lock:
            return store.recover_stalled(max_stalled)

    async def prune_jobs(self, rules: Sequence[PruneRule]) -> int:
        store = self._ready()
        with store.lock:
            return store.prune(rules)

    # -- queues ------------------------------------------------------------
    async def configure_queue(self, name: str, max_size: int | None, ttl: float | None) -> None:
        store = self._ready()
        with store.lock:
            store.configure_queue(name, max_size, ttl)

    async def set_queue_paused(self, name: str, paused: bool) -> None:
        store = self._ready()
        with store.lock:
            store.set_paused(name, paused)

    async def list_queues(self) -> list[QueueInfo]:
        store = self._ready()
        with store.lock:
            return store.list_queues()

    # -- circuits ----------------------------------------------------------
    async def list_circuits(self) -> list[CircuitInfo]:
        store = self._ready()
        with store.lock:
            return store.list_circuits()

    async def reset_circuit(self, task: str) -> None:
        store = self._ready()
        with store.lock:
            store.reset_circuit(task)

    # -- heartbeats --------------------------------------------------------
    async def record_heartbeat(self, worker: WorkerInfo) -> None:
        store = self._ready()
        with store.lock:
            store.record_heartbeat(worker)

    async def list_workers(self) -> list[WorkerInfo]:
        store = self._ready()
        with store.lock:
            return store.list_workers()

    async def remove_worker(self, worker_id: str) -> None:
        store = self._ready()
        with store.lock:
            store.workers.pop(worker_id, None)

    async def prune_workers(self, older_than: float) -> int:
        store = self._ready()
        with store.lock:
            return store.prune_workers(older_than)

    # -- schedules -----------------------------------------------------------
    async def sync_schedules(
        self, specs: Sequence[ScheduleSpec], first_fires: Mapping[str, float | None]
    ) -> list[ScheduleRecord]:
        store = self._ready()
        with store.lock:
            return store.schedules.sync(specs, first_fires, store.now())

    async def list_schedules(self) -> list[ScheduleRecord]:
        store = self._ready()
        with store.lock:
            return store.schedules.list()

    async def update_schedule(
        self,
        name: str,
        *,
        paused: bool | None = None,
        cron: str | None = None,
        every: float | None = None,
        next_fire_at: float | None = None,
        reschedule: bool = False,
    ) -> ScheduleRecord | None:
        store = self._ready()
        with store.lock:
            return store.schedules.update(
                name,
                store.now(),
                paused=paused,
                cron=cron,
                every=every,
                next_fire_at=next_fire_at,
                reschedule=reschedule,
            )

    async def advance_schedule(
        self, name: str, fired_at: float, next_fire_at: float | None, *, fired: bool = True
    ) -> bool:
        store = self._ready()
        with store.lock:
            return store.schedules.advance(name, fired_at, next_fire_at, fired, store.now())

    async def delete_schedules(self, names: Sequence[str]) -> int:
        store = self._ready()
        with store.lock:
            return store.schedules.delete(names)

    # -- job statistics ----------------------------------------------------
    async def record_job_stats(self, stats: Sequence[JobStat]) -> None:
        store = self._ready()
        with store.lock:
            store.job_stats.record(stats, store.now())

    async def job_stat_totals(self) -> list[JobStat]:
        store = self._ready()
        with store.lock:
            return store.job_stats.list_totals()

    async def job_stat_series(self, since: float) -> list[JobStat]:
        store = self._ready()
        with store.lock:
            return store.job_stats.list_series(since)

    async def prune_job_stats(self, older_than: float) -> int:
        store = self._ready()
        with store.lock:
            return store.job_stats.prune(store.now() - older_than)

"""The memory store: its row types, state and indexes, and the stores by name.

Every area module (enqueue, claim, settle, ...) works on a :class:`Store` while
its caller holds ``store.lock`` and never awaits in between, so each operation is
atomic (also against another thread using the same store, e.g. ``enqueue_sync``).

Indexes kept beside the ``jobs`` dict, all with lazy deletion (an entry carries
the row's ``seq`` and is dropped when it no longer matches the row):

- ``waiting[queue][(task, tenant)]``: a heap of ``(-priority, run_at, id, seq)``,
  so a claim merges the heads of the heaps it may take from and never scans the
  jobs of a blocked task (open circuit, rate limit, task cap). ``tenant`` is
  the job's tenant in a fair queue and always ``None`` in a plain one, so a fair
  claim finds each tenant's head without scanning its backlog;
- ``delayed``: a heap of ``(run_at, id, seq)`` for promotion inside the claim;
- ``expiring``: a heap of ``(expires_at, id, seq)`` of waiting jobs with a TTL;
- ``by_state`` and ``counts[queue][state]``, maintained on every state change.
"""

from __future__ import annotations

import asyncio
import heapq
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from conveyor.backends.base import CircuitState, JobStat, QueueInfo, ScheduleRecord, WorkerInfo
from conveyor.backends.rows import decode_fields
from conveyor.backends.worksignal import PendingQueues
from conveyor.errors import ConfigurationError
from conveyor.job import (
    TERMINAL_STATES,
    DependencyPolicy,
    ErrorInfo,
    FailureReason,
    Job,
    JobState,
)

WaitEntry = tuple[int, float, str, int]  # (-priority, run_at, id, seq)
HeapKey = tuple[str, str | None]  # (task, tenant in a fair queue / None)
TimeEntry = tuple[float, str, int]  # (time, id, seq)
StatKey = tuple[str, str, str]  # (task, queue, status)


@dataclass(slots=True)
class Row:
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
    depends_on: tuple[str, ...] = ()
    on_dependency_failure: DependencyPolicy = DependencyPolicy.CANCEL
    workflow_id: str | None = None
    concurrency_key: str | None = None
    rate_limit_key: str | None = None
    dependents: list[str] | None = None
    """Ids of the blocked jobs waiting on this one (``None``: none ever did)."""
    seq: int = 0
    """Bumped each time the row enters waiting or delayed; index entries carry it."""


@dataclass(slots=True)
class IdempotencyKey:
    """An idempotency key; it outlives its job's row until ``expires_at``."""

    name: str
    job_id: str
    task: str
    queue: str
    expires_at: float
    state: JobState | None = None
    """The state the job had when its row was deleted (``None`` while it exists)."""


@dataclass(slots=True)
class Circuit:
    state: CircuitState = CircuitState.CLOSED
    failures: int = 0
    open_until: float | None = None
    open_for: float = 0.0
    """From the last failure's policy: how long a failed trial re-opens it."""


@dataclass(slots=True)
class FairClock:
    """A fair queue's virtual time and its tenants' passes (the rule in
    ``backends/base.py``); a pass at or below ``vtime`` may be dropped."""

    vtime: float = 0.0
    passes: dict[str | None, float] = field(default_factory=dict)


@dataclass(slots=True)
class RateLog:
    """Start times of a rate-limited task (a sliding log)."""

    period: float
    starts: deque[float] = field(default_factory=deque)

    def trim(self, now: float, period: float) -> None:
        floor = now - period
        while self.starts and self.starts[0] <= floor:
            self.starts.popleft()


def copy_error(error: ErrorInfo) -> ErrorInfo:
    return replace(error)


def to_job(row: Row, duplicate: bool = False) -> Job:
    """A fresh :class:`Job` built from ``row``: nothing in it aliases the store."""
    fields = decode_fields(row.payload, row.metadata, row.result, row.progress)
    errors = [copy_error(e) for e in row.errors]
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
        depends_on=row.depends_on,
        on_dependency_failure=row.on_dependency_failure,
        workflow_id=row.workflow_id,
        concurrency_key=row.concurrency_key,
        rate_limit_key=row.rate_limit_key,
        duplicate=duplicate,
        decode_error=fields.problem,
    )


def deadline(start: float, ttl: float | None) -> float | None:
    """``expires_at`` of a wait that starts at ``start``: each wait gets the whole TTL."""
    return None if ttl is None else start + ttl


def _wake(future: asyncio.Future[bool], work: bool) -> None:
    if not future.done():
        future.set_result(work)


class Store:
    """Everything one store holds. Callers hold ``lock`` around every method."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last_now = 0.0
        self.jobs: dict[str, Row] = {}
        self.by_state: dict[JobState, set[str]] = {state: set() for state in JobState}
        self.counts: dict[str, dict[JobState, int]] = {}
        self.waiting: dict[str, dict[HeapKey, list[WaitEntry]]] = {}
        self.fair: dict[str, FairClock] = {}
        self.delayed: list[TimeEntry] = []
        self.expiring: list[TimeEntry] = []
        self.keys: dict[str, IdempotencyKey] = {}
        self.queues: dict[str, QueueInfo] = {}
        self.circuits: dict[str, Circuit] = {}
        self.rates: dict[str, RateLog] = {}
        # Starts per (task, rate_limit_key): the windows key_rate_limits count.
        self.key_rates: dict[tuple[str, str | None], RateLog] = {}
        self.workers: dict[str, WorkerInfo] = {}
        self.waiters: dict[asyncio.Future[bool], frozenset[str]] = {}
        # Queues notified while no waiter on them was listening: a worker between
        # an empty claim and its next wait must not sleep through that work.
        self.pending = PendingQueues()
        self.schedules: dict[str, ScheduleRecord] = {}
        self.stat_totals: dict[StatKey, JobStat] = {}
        self.stat_series: dict[tuple[float, str, str, str], JobStat] = {}
        # Active jobs per (task, concurrency_key): the slots key_limits count.
        self.running_keys: dict[tuple[str, str | None], int] = {}
        # Rows that became terminal with dependents left to resolve (see move).
        self._finished: list[Row] = []
        self._resolving = False

    # -- clock -------------------------------------------------------------
    def now(self) -> float:
        """Host clock, never going backwards for this store."""
        now = time.time()
        if now < self.last_now:
            return self.last_now
        self.last_now = now
        return now

    # -- rows and indexes --------------------------------------------------
    def _index(self, row: Row) -> None:
        """Add index entries for the state ``row`` just entered."""
        if row.state is JobState.WAITING:
            row.seq += 1
            self._push_waiting(row)
            if row.expires_at is not None:
                heapq.heappush(self.expiring, (row.expires_at, row.id, row.seq))
        elif row.state is JobState.DELAYED:
            row.seq += 1
            heapq.heappush(self.delayed, (row.run_at, row.id, row.seq))

    def is_fair(self, queue: str) -> bool:
        info = self.queues.get(queue)
        return info is not None and info.fairness is not None

    def _push_waiting(self, row: Row) -> None:
        key = (row.task, row.tenant if self.is_fair(row.queue) else None)
        heap = self.waiting.setdefault(row.queue, {}).setdefault(key, [])
        heapq.heappush(heap, (-row.priority, row.run_at, row.id, row.seq))

    def reindex_waiting(self, queue: str) -> None:
        """Rebuild ``queue``'s waiting heaps after it became fair or plain."""
        self.waiting.pop(queue, None)
        for job_id in self.by_state[JobState.WAITING]:
            row = self.jobs[job_id]
            if row.queue == queue:
                self._push_waiting(row)

    def insert(self, row: Row) -> None:
        self.jobs[row.id] = row
        self.by_state[row.state].add(row.id)
        counts = self.counts.setdefault(row.queue, dict.fromkeys(JobState, 0))
        counts[row.state] += 1
        self._index(row)

    def move(self, row: Row, state: JobState) -> None:
        old = row.state
        if old is not state:
            self.by_state[old].discard(row.id)
            self.by_state[state].add(row.id)
            counts = self.counts[row.queue]
            counts[old] -= 1
            counts[state] += 1
            row.state = state
            # Every way in and out of active passes here: the per-key slots with it.
            if state is JobState.ACTIVE or old is JobState.ACTIVE:
                group = (row.task, row.concurrency_key)
                held = self.running_keys.get(group, 0) + (1 if state is JobState.ACTIVE else -1)
                if held:
                    self.running_keys[group] = held
                else:
                    del self.running_keys[group]
        self._index(row)
        if row.dependents is not None and state in TERMINAL_STATES:
            self._finished.append(row)
            if not self._resolving:
                self._resolve_dependents()

    # -- dependencies --------------------------------------------------------
    def dependency_verdict(self, row: Row) -> JobState | None:
        """Where a blocked ``row`` goes now: ``WAITING`` (every dependency
        satisfied), ``CANCELLED`` (one failed under policy cancel), or ``None``
        (still blocked). A dependency that is gone counts as completed: only
        terminal jobs are ever deleted."""
        runs_anyway = row.on_dependency_failure is DependencyPolicy.RUN
        ready = True
        for dep_id in row.depends_on:
            dep = self.jobs.get(dep_id)
            if dep is None or dep.state is JobState.COMPLETED:
                continue
            if dep.state in TERMINAL_STATES:
                if not runs_anyway:
                    return JobState.CANCELLED
                continue
            ready = False
        return JobState.WAITING if ready else None

    def unblock(self, row: Row, verdict: JobState, now: float) -> None:
        """Move a blocked (or new) ``row`` out by ``verdict``; cascades through
        ``move`` when it ends cancelled."""
        if verdict is JobState.CANCELLED:
            row.failure_reason = FailureReason.DEPENDENCY_FAILED
            row.finished_at = now
            self.move(row, JobState.CANCELLED)
            return
        row.run_at = max(row.run_at, now)
        row.expires_at = deadline(row.run_at, row.ttl)
        self.move(row, JobState.DELAYED if row.run_at > now else JobState.WAITING)
        if row.state is JobState.WAITING:
            self.notify([row.queue])
        else:
            self.notify(timer=True)

    def _resolve_dependents(self) -> None:
        """Work off the rows that just finished; a cancel that cascades appends to
        the list instead of recursing (a chain may be thousands of jobs long)."""
        self._resolving = True
        try:
            now = self.now()
            while self._finished:
                finished = self._finished.pop()
                for dep_id in finished.dependents or ():
                    row = self.jobs.get(dep_id)
                    if row is None or row.state is not JobState.BLOCKED:
                        continue
                    verdict = self.dependency_verdict(row)
                    if verdict is not None:
                        self.unblock(row, verdict, now)
        finally:
            self._resolving = False

    def remove(self, row: Row) -> None:
        del self.jobs[row.id]
        self.by_state[row.state].discard(row.id)
        self.counts[row.queue][row.state] -= 1
        if row.idempotency_key is not None:
            key = self.keys.get(row.idempotency_key)
            if key is not None and key.job_id == row.id:
                key.state = row.state

    def live(self, entry_id: str, seq: int, state: JobState) -> Row | None:
        """The row an index entry points at, if the entry is still current."""
        row = self.jobs.get(entry_id)
        if row is None or row.state is not state or row.seq != seq:
            return None
        return row

    def clean_waiting(self, heap: list[WaitEntry]) -> None:
        while heap and self.live(heap[0][2], heap[0][3], JobState.WAITING) is None:
            heapq.heappop(heap)

    def effective_ttl(self, job_ttl: float | None, queue: str) -> float | None:
        """The smaller of the job's TTL and its queue's, fixed at enqueue."""
        info = self.queues.get(queue)
        queue_ttl = info.ttl if info is not None else None
        if queue_ttl is None:
            return job_ttl
        return queue_ttl if job_ttl is None else min(job_ttl, queue_ttl)

    def pending_count(self, queue: str) -> int:
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
            and self.live(self.delayed[0][1], self.delayed[0][2], JobState.DELAYED) is None
        ):
            heapq.heappop(self.delayed)
        return self.delayed[0][0] if self.delayed else None


_STORES: dict[str, Store] = {}
_STORES_LOCK = threading.Lock()


def store_for(url: str) -> Store:
    """A fresh store for ``memory://``; the one shared store for ``memory://NAME``."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != "memory":
        raise ConfigurationError(f"url: {url!r} is not a memory:// URL")
    name = rest.split("?", 1)[0].strip("/")
    if not name:
        return Store()
    with _STORES_LOCK:
        store = _STORES.get(name)
        if store is None:
            store = _STORES[name] = Store()
        return store


def drop_memory_store(name: str) -> None:
    """Forget the shared store ``memory://NAME`` (open backends keep their data)."""
    with _STORES_LOCK:
        _STORES.pop(name, None)

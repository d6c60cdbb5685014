"""The backend contract: flat, named, batch-shaped storage operations.

A backend persists jobs and carries out state changes atomically. It never
decides policy: retries, backoff, which outcome a run had, rate-limit and
circuit thresholds all come from the core as parameters. Every backend passes
the same conformance suite (``tests/conformance``).

Rules every implementation follows:

- Times are POSIX seconds read from the backend's own clock (G11); ``now()``
  exposes it. Relative inputs (``delay``, ``ttl``, ``lease``) are added to that
  clock inside the operation, never to a worker's.
- ``claim_jobs`` is atomic: two claimers never get the same job. It counts the
  attempt (G5), stamps a fresh lease token (G4), and expires TTL'd jobs and
  promotes due delayed jobs before choosing (G8).
- ``renew_leases``, ``settle_jobs`` and ``save_progress`` act only on jobs that
  are ``active`` with the given lease token; anything else is refused (G4).
- A TTL bounds each wait, not only the first: a job keeps its effective ``ttl``
  and ``expires_at`` is re-set to the start of the wait + ``ttl`` every time it
  (re)enters waiting (enqueue, retry, release, stall recovery, dead-letter retry).
- RELEASE gives the attempt back. With ``retry_delay`` 0 the job is ``waiting``
  again in its old place (``run_at`` kept); with ``retry_delay`` > 0 it is
  ``delayed`` until now + ``retry_delay``, like a RETRY, its ``expires_at`` that
  run_at + ``ttl``.
- A pending cancel wins over RETRY, RELEASE and stall recovery: the job ends
  ``cancelled`` instead of waiting again.
- One call is one round trip (or one transaction) whatever the batch size.
- Dependencies (``NewJob.depends_on``): every id must be a stored job or one
  earlier in the same batch, else ``InvalidWorkflow`` and nothing is stored. At
  enqueue a job whose dependencies all completed (or finished, with policy
  ``run``) is waiting/delayed as usual; one with a dependency that failed or was
  cancelled and policy ``cancel`` is stored ``cancelled`` with failure reason
  ``dependency_failed``; otherwise it is ``blocked``. Whenever a job becomes
  terminal, in whatever operation (settle, cancel, stall recovery, TTL expiry in
  the claim), the same operation resolves its blocked dependents: released to
  waiting (delayed if their ``run_at`` is still ahead) once every dependency is
  satisfied, or cancelled ``dependency_failed``, transitively. Exactly once,
  however many operations finish dependencies at the same moment.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from conveyor.backends.records import (
    COUNTED_STATES,
    DURATION_BUCKETS,
    CircuitInfo,
    CircuitState,
    JobStat,
    MisfirePolicy,
    QueueInfo,
    ScheduleRecord,
    ScheduleSpec,
    WorkerInfo,
    fit_buckets,
)
from conveyor.errors import InvalidStateError
from conveyor.job import DependencyPolicy, ErrorInfo, FailureReason, Job, JobState
from conveyor.ratelimit import RateLimit

# The contract's records live in records.py; importing them from here keeps
# one place to import the whole contract from.
__all__ = [
    "COUNTED_STATES",
    "DURATION_BUCKETS",
    "Backend",
    "CircuitInfo",
    "CircuitPolicy",
    "CircuitState",
    "ClaimRequest",
    "ClaimResult",
    "Handoff",
    "JobFilter",
    "JobStat",
    "MisfirePolicy",
    "NewJob",
    "Outcome",
    "PruneRule",
    "QueueInfo",
    "RenewResult",
    "ScheduleRecord",
    "ScheduleSpec",
    "SettleResult",
    "Settlement",
    "StallResult",
    "TransactionalEnqueue",
    "WorkerInfo",
    "earlier_retry",
    "fit_buckets",
]


@dataclass(slots=True)
class NewJob:
    """A job to insert. ``payload`` and ``metadata`` are already JSON-encoded."""

    id: str
    task: str
    queue: str
    payload: bytes
    priority: int = 0
    max_attempts: int = 3
    timeout: float | None = None
    delay: float = 0.0
    """Seconds after the backend's now; ignored when ``run_at`` is set."""
    run_at: float | None = None
    """Absolute POSIX time to run at."""
    ttl: float | None = None
    """Seconds the job may stay ``waiting`` in each wait; the queue's ``ttl`` applies
    too (the smaller wins, stored as ``Job.ttl``). ``expires_at = run_at + ttl``,
    re-set each time the job waits again (see the contract doc)."""
    idempotency_key: str | None = None
    idempotency_ttl: float = 86400.0
    tenant: str | None = None
    metadata: bytes | None = None
    retry_of: str | None = None
    depends_on: Sequence[str] = ()
    """Ids of jobs stored before, or earlier in the same batch, that this job
    waits for (it is ``blocked`` until they finish); see the contract doc."""
    on_dependency_failure: DependencyPolicy = DependencyPolicy.CANCEL
    workflow_id: str | None = None


@dataclass(slots=True)
class ClaimRequest:
    """What a worker asks for: up to ``limit`` due jobs from ``queues``."""

    worker_id: str
    queues: Sequence[str]
    limit: int
    lease: float
    """Seconds; ``lease_until = now + lease``."""
    task_limits: Mapping[str, int] = field(default_factory=dict)
    """Per-task cap for this claim (free per-task concurrency slots); absent = no cap."""
    rate_limits: Mapping[str, RateLimit] = field(default_factory=dict)
    """Cluster-wide sliding-window limits on starts, per task."""
    circuit_tasks: bool = True
    """Honour circuit state: skip tasks whose circuit is open; admit one trial
    job when its open period has passed (half-open)."""
    handoff_for: float = 0.0
    """Backends that hand off (:attr:`Backend.hands_off`): when the claim comes
    back short, keep this request for this many seconds, so that an enqueue
    claims new work for the worker directly (:meth:`Backend.next_handoff`).
    Each claim replaces it; 0 registers nothing. Only for requests without
    ``task_limits`` and ``rate_limits`` (stored once, they would go stale)."""


@dataclass(slots=True)
class ClaimResult:
    jobs: list[Job]
    """Claimed jobs: ``active``, attempts counted, sharing one fresh lease token."""
    expired: list[Job] = field(default_factory=list)
    """Jobs this claim moved to ``failed``/``expired`` because their TTL passed."""


@dataclass(slots=True)
class Handoff:
    """Jobs an enqueue claimed for an idle worker (see ``ClaimRequest.handoff_for``)."""

    result: ClaimResult
    leased_at: float
    """A ``time.monotonic()`` reading no later than the start of these jobs'
    lease (what a worker's trust in the lease counts from)."""


class Outcome(enum.StrEnum):
    """What the worker decided for one finished run."""

    COMPLETE = "complete"  # -> completed, result stored
    RETRY = "retry"  # -> delayed until now + retry_delay, error recorded; cancelled if requested
    FAIL = "fail"  # -> failed with failure_reason, error recorded (dead-lettered)
    CANCEL = "cancel"  # -> cancelled
    # -> waiting, attempt given back (shutdown); with retry_delay > 0: delayed until
    # now + retry_delay, attempt given back (a task this worker does not know);
    # cancelled if requested
    RELEASE = "release"


@dataclass(frozen=True, slots=True)
class CircuitPolicy:
    threshold: int
    open_for: float


@dataclass(slots=True)
class Settlement:
    job_id: str
    lease_token: str
    outcome: Outcome
    task: str = ""
    result: bytes | None = None
    error: ErrorInfo | None = None
    failure_reason: FailureReason | None = None
    retry_delay: float = 0.0
    """Seconds a RETRY (or a RELEASE, when > 0) waits ``delayed`` before it is due."""
    circuit: CircuitPolicy | None = None
    """Count this run in the task's circuit: COMPLETE is a success, RETRY/FAIL a
    failure. ``None`` leaves the circuit alone (cancel, release, invalid input)."""
    progress: bytes | None = None
    """Last progress not yet saved, stored with the outcome."""


@dataclass(slots=True)
class SettleResult:
    refused: set[str] = field(default_factory=set)
    """Ids whose lease token no longer matched (or that were no longer active)."""
    circuit_changes: list[CircuitInfo] = field(default_factory=list)
    """Circuits this call opened or closed."""
    cancelled: set[str] = field(default_factory=set)
    """Ids settled RETRY or RELEASE that ended ``cancelled`` instead, because a
    cancel was requested while they ran."""


@dataclass(slots=True)
class RenewResult:
    renewed: set[str] = field(default_factory=set)
    lost: set[str] = field(default_factory=set)
    """Not active under this token any more: stop trusting the lease (G4)."""
    cancel_requested: set[str] = field(default_factory=set)


@dataclass(slots=True)
class StallResult:
    requeued: list[Job] = field(default_factory=list)
    failed: list[Job] = field(default_factory=list)
    cancelled: list[Job] = field(default_factory=list)
    """Stalled jobs that had a cancel request: ``cancelled``, not run again."""


@dataclass(slots=True)
class JobFilter:
    states: Sequence[JobState] | None = None
    queue: str | None = None
    task: str | None = None
    tenant: str | None = None
    failure_reason: FailureReason | None = None
    idempotency_key: str | None = None
    finished_before: float | None = None
    """Only jobs whose ``finished_at`` is before this POSIX time."""
    workflow_id: str | None = None

    def only_states(self) -> bool:
        """Filters by state and nothing else (SQL backends answer it from the
        per-state partial indexes alone)."""
        return self.states is not None and all(
            v is None
            for v in (
                self.queue,
                self.task,
                self.tenant,
                self.failure_reason,
                self.idempotency_key,
                self.finished_before,
                self.workflow_id,
            )
        )


@dataclass(slots=True)
class PruneRule:
    """Delete terminal jobs in ``state`` beyond an age and/or a count."""

    state: JobState
    max_age: float | None = None
    max_count: int | None = None
    task: str | None = None
    """Only this task; ``None`` = every task not in ``exclude_tasks``."""
    exclude_tasks: Sequence[str] = ()


def earlier_retry(job_id: str, retried_as: str, found: Sequence[Job]) -> Job:
    """What ``retry_failed`` returns for a dead letter retried before: the job it
    was retried as, marked ``duplicate``; refused when that job is gone (it was
    deleted or pruned), so that a retry never runs the work a second time."""
    if not found:
        raise InvalidStateError(
            f"job {job_id} was already retried as {retried_as}, which no longer exists"
        )
    job = found[0]
    job.duplicate = True
    return job


class Backend(abc.ABC):
    """Storage for jobs, queues, circuits, rate-limit windows and heartbeats."""

    url: str

    # -- lifecycle ---------------------------------------------------------
    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and bring the schema up to date. Idempotent."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections. Idempotent."""

    @abc.abstractmethod
    async def now(self) -> float:
        """The backend's clock, POSIX seconds (G11)."""

    @abc.abstractmethod
    async def ping(self) -> float:
        """Round-trip latency in seconds; raises :class:`BackendUnavailable` when down."""

    # -- jobs: the hot path ------------------------------------------------
    @abc.abstractmethod
    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        """Insert ``jobs`` atomically, in order; returns one Job per input.

        A live idempotency key returns the existing job with ``duplicate=True``
        and inserts nothing for it (G7). A queue's ``max_size`` counts its
        waiting + delayed jobs; a batch that would pass it raises
        :class:`~conveyor.errors.QueueFull` and stores nothing.
        """

    @abc.abstractmethod
    async def claim_jobs(self, request: ClaimRequest) -> ClaimResult:
        """Atomically claim up to ``request.limit`` due jobs (see module doc)."""

    @abc.abstractmethod
    async def renew_leases(
        self, worker_id: str, leases: Sequence[tuple[str, str]], lease: float
    ) -> RenewResult:
        """Extend ``(job_id, lease_token)`` leases to ``now + lease``."""

    @abc.abstractmethod
    async def settle_jobs(self, settlements: Sequence[Settlement]) -> SettleResult:
        """Apply each run's outcome, fenced by its lease token; update circuits.
        RETRY/RELEASE of a job with a pending cancel request ends it ``cancelled``."""

    @abc.abstractmethod
    async def save_progress(self, items: Sequence[tuple[str, str, bytes]]) -> set[str]:
        """Store ``(job_id, lease_token, progress_json)``; returns the refused ids."""

    @abc.abstractmethod
    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        """Return when new work may be due in ``queues``, or after ``timeout``."""

    #: Whether enqueues claim for idle workers (``ClaimRequest.handoff_for``).
    hands_off: bool = False

    async def next_handoff(self, worker_id: str, timeout: float) -> list[Handoff] | None:
        """Wait up to ``timeout`` for jobs handed to ``worker_id`` ([] if none came);
        ``None`` once :meth:`end_handoffs` was called for it. One caller per worker."""
        raise NotImplementedError(f"{type(self).__name__} does not hand off")

    async def end_handoffs(self, worker_id: str, lease: float) -> ClaimResult:
        """Unregister ``worker_id``; returns the jobs handed to it and not yet
        popped (leased to it for ``lease`` seconds from now: the caller releases
        them), and ends its ``next_handoff``."""
        raise NotImplementedError(f"{type(self).__name__} does not hand off")

    # -- jobs: reading and acting ------------------------------------------
    @abc.abstractmethod
    async def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        """The jobs that exist among ``job_ids`` (any order)."""

    @abc.abstractmethod
    async def list_jobs(self, where: JobFilter, limit: int = 100, offset: int = 0) -> list[Job]:
        """Matching jobs, newest first (by id: ids increase with creation)."""

    @abc.abstractmethod
    async def count_jobs(self, where: JobFilter) -> int: ...

    @abc.abstractmethod
    async def cancel_job(self, job_id: str) -> Job | None:
        """Waiting/delayed: cancelled now. Active: flagged ``cancel_requested``.
        Terminal: unchanged. Returns the job after the change, or ``None``."""

    @abc.abstractmethod
    async def cancel_requests(self, job_ids: Sequence[str]) -> set[str]:
        """Which of these active jobs have a cancel request."""

    @abc.abstractmethod
    async def retry_failed(self, job_id: str, new_id: str) -> Job:
        """Copy a failed job into a new waiting job with fresh attempts and the same
        ``ttl`` (``expires_at = now + ttl``); the original gets ``retried_as``.

        Once per dead letter, atomically: a failed job that already has
        ``retried_as`` creates nothing and returns that job with
        ``duplicate=True`` (see :func:`earlier_retry`), however many retries race.
        Raises JobNotFound / InvalidStateError."""

    @abc.abstractmethod
    async def delete_jobs(self, job_ids: Sequence[str]) -> int:
        """Delete these jobs (any state but active); returns how many."""

    @abc.abstractmethod
    async def purge_jobs(self, where: JobFilter) -> int:
        """Delete every job matching ``where`` (never active ones)."""

    @abc.abstractmethod
    async def queue_counts(self) -> dict[str, dict[str, int]]:
        """``{queue: {state: count}}`` with every state present (zeros included)."""

    @abc.abstractmethod
    async def oldest_waiting(self) -> dict[str, float]:
        """``{queue: run_at of its oldest due waiting job}``."""

    # -- maintenance -------------------------------------------------------
    @abc.abstractmethod
    async def recover_stalled(self, max_stalled: int) -> StallResult:
        """Active jobs whose lease expired: back to waiting with ``stalls + 1``
        (``expires_at = now + ttl``); failed/stalled when that passes
        ``max_stalled`` or no attempt is left; cancelled when a cancel is pending."""

    @abc.abstractmethod
    async def prune_jobs(self, rules: Sequence[PruneRule]) -> int:
        """Apply retention rules; also drop expired idempotency keys and
        rate-limit history. Returns how many jobs were deleted."""

    # -- queues ------------------------------------------------------------
    @abc.abstractmethod
    async def configure_queue(self, name: str, max_size: int | None, ttl: float | None) -> None:
        """Create or update a queue's limits (its paused flag is kept)."""

    @abc.abstractmethod
    async def set_queue_paused(self, name: str, paused: bool) -> None: ...

    @abc.abstractmethod
    async def list_queues(self) -> list[QueueInfo]:
        """Configured queues and every queue that holds a job."""

    # -- circuits ----------------------------------------------------------
    @abc.abstractmethod
    async def list_circuits(self) -> list[CircuitInfo]: ...

    @abc.abstractmethod
    async def reset_circuit(self, task: str) -> None: ...

    @abc.abstractmethod
    async def clear_circuit_failures(self, task: str | None) -> None:
        """Forget the failures counted by the *closed* circuit of ``task`` (of every
        task when ``None``); an open or half-open circuit is left as it is."""

    # -- heartbeats --------------------------------------------------------
    @abc.abstractmethod
    async def record_heartbeat(self, worker: WorkerInfo) -> None:
        """Upsert the worker; ``last_seen`` is the backend's now."""

    @abc.abstractmethod
    async def list_workers(self) -> list[WorkerInfo]: ...

    @abc.abstractmethod
    async def remove_worker(self, worker_id: str) -> None: ...

    @abc.abstractmethod
    async def prune_workers(self, older_than: float) -> int:
        """Delete heartbeat rows whose ``last_seen`` is before ``now - older_than``
        (backend clock); returns how many."""

    # -- schedules ---------------------------------------------------------
    @abc.abstractmethod
    async def sync_schedules(
        self, specs: Sequence[ScheduleSpec], first_fires: Mapping[str, float | None]
    ) -> list[ScheduleRecord]:
        """Store the code's schedules; returns their records, in ``specs`` order.

        A new name is inserted with ``next_fire_at = first_fires[name]``. A stored
        schedule with the same fingerprint is left exactly as it is (pause,
        cron override, next fire, fire count survive restarts and deploys). A
        changed fingerprint replaces the definition, drops a cron override and
        sets ``next_fire_at = first_fires[name]``; ``paused`` and ``fires`` are kept.
        Concurrent calls from several schedulers are safe.
        """

    @abc.abstractmethod
    async def list_schedules(self) -> list[ScheduleRecord]:
        """Every stored schedule, by name."""

    @abc.abstractmethod
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
        """Operator changes: ``paused`` when not ``None``; a new ``cron`` or
        ``every`` (an override; setting one clears the other); ``next_fire_at``
        replaced when ``reschedule`` is true. Returns the record, or ``None``
        when no schedule has that name."""

    @abc.abstractmethod
    async def advance_schedule(
        self, name: str, fired_at: float, next_fire_at: float | None, *, fired: bool = True
    ) -> bool:
        """Compare-and-set after a fire was enqueued: only when the stored
        ``next_fire_at`` still equals ``fired_at`` (exactly), set it to
        ``next_fire_at``, add 1 to ``fires`` and set ``last_fire_at = fired_at``.
        With ``fired=False`` (missed slots skipped by the misfire policy) only
        ``next_fire_at`` moves: ``fires`` and ``last_fire_at`` are left alone.
        A paused schedule moves too (the caller decides). Returns whether it
        moved (``False``: another scheduler or an operator already moved it)."""

    @abc.abstractmethod
    async def delete_schedules(self, names: Sequence[str]) -> int:
        """Forget these schedules; returns how many existed."""

    # -- job statistics (metrics and throughput history) --------------------
    @abc.abstractmethod
    async def record_job_stats(self, stats: Sequence[JobStat]) -> None:
        """Add these increments to the cumulative totals and to the series row
        of the current minute (backend clock), summing count, duration_sum and
        each bucket. Atomic per call; safe from many workers at once."""

    @abc.abstractmethod
    async def job_stat_totals(self) -> list[JobStat]:
        """Cumulative totals per ``(task, queue, status)`` (``minute`` is 0)."""

    @abc.abstractmethod
    async def job_stat_series(self, since: float) -> list[JobStat]:
        """Per-minute rows with ``minute >= since``, oldest first."""

    @abc.abstractmethod
    async def prune_job_stats(self, older_than: float) -> int:
        """Delete series rows whose minute is before ``now - older_than``
        (totals are never pruned); returns how many."""

    # -- conveniences built on the contract --------------------------------
    async def get_job(self, job_id: str) -> Job | None:
        jobs = await self.get_jobs([job_id])
        return jobs[0] if jobs else None

    async def __aenter__(self) -> Backend:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


@runtime_checkable
class TransactionalEnqueue(Protocol):
    """A backend that can insert jobs inside the caller's own open transaction,
    on the caller's own database connection (``app.enqueue(..., connection=conn)``):
    the jobs commit or roll back with the caller's data. Only PostgreSQL has it."""

    async def enqueue_jobs_on(self, connection: Any, jobs: Sequence[NewJob]) -> list[Job]: ...

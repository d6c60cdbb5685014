"""The inputs and outputs of the backend operations: what the core passes to a
:class:`~conveyor.backends.base.Backend` operation (jobs to insert, claim
requests, settlements, filters, retention rules) and what it gets back. Part of
the backend contract (re-exported by :mod:`conveyor.backends.base`)."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from conveyor.backends.records import CircuitInfo
from conveyor.errors import InvalidStateError
from conveyor.job import DependencyPolicy, ErrorInfo, FailureReason, Job, JobState
from conveyor.ratelimit import RateLimit


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
    concurrency_key: str | None = None
    """Stored as ``Job.concurrency_key``: the group ``ClaimRequest.key_limits``
    counts this job's task's running jobs in."""
    rate_limit_key: str | None = None
    """Stored as ``Job.rate_limit_key``: the window ``ClaimRequest.key_rate_limits``
    counts this job's start in."""
    debounce: float | None = None
    """Seconds (> 0), only with ``idempotency_key``: while the key's job has not
    started (waiting or delayed), this enqueue replaces its payload and metadata
    and postpones it to now + ``debounce``; otherwise a new job is stored,
    delayed until now + ``debounce`` (see the contract doc)."""


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
    key_limits: Mapping[str, int] = field(default_factory=dict)
    """Cluster-wide caps per task: at most this many ``active`` jobs of the task
    with the same ``concurrency_key`` (``None`` is one group of its own), counted
    over every worker, this claim's jobs included. A full group is skipped, never
    waited on: jobs behind it with other keys are claimed."""
    key_rate_limits: Mapping[str, RateLimit] = field(default_factory=dict)
    """Cluster-wide sliding-window limits on starts per task and
    ``rate_limit_key``: one window per ``(task, rate_limit_key)`` (``None`` is
    one window of its own), with ``rate_limits``' mechanics, counted over every
    worker, this claim's jobs included. A key over its limit is skipped, never
    waited on: jobs behind it with other keys are claimed."""
    circuit_tasks: bool = True
    """Honour circuit state: skip tasks whose circuit is open; admit one trial
    job when its open period has passed (half-open)."""
    handoff_for: float = 0.0
    """Backends that hand off
    (:attr:`~conveyor.backends.base.Backend.hands_off`): when the claim comes
    back short, keep this request for this many seconds, so that an enqueue
    claims new work for the worker directly
    (:meth:`~conveyor.backends.base.Backend.next_handoff`). Each claim replaces
    it; 0 registers nothing. Only for requests without ``task_limits``,
    ``rate_limits``, ``key_limits`` and ``key_rate_limits`` (stored once, they would go stale)."""


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

"""The job record, its states and the transitions between them.

Backends store and return :class:`Job` values; the core decides every state
change (see :data:`TRANSITIONS`), backends only carry them out atomically.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol

JSON = Any  # payloads, results and metadata: JSON-serialisable values only


class JobState(enum.StrEnum):
    """Where a job is in its life. Each member names who moves jobs in and out."""

    BLOCKED = "blocked"
    """Waits for the jobs it depends on (``depends_on``). In: enqueue, when a
    dependency is not finished yet; a dead-letter retry of the dependency that
    cancelled it (``dependency_failed``), now waiting on the copy. Out: the
    backend operation that finishes its last dependency (to waiting, or delayed
    until its ``run_at``), or cancelled with reason ``dependency_failed`` when a
    dependency failed or was cancelled (policy ``cancel``), or ``app.cancel``."""

    WAITING = "waiting"
    """In: enqueue, delayed promotion (inside the claim), stall recovery, release at
    shutdown, dead-letter retry (as a new job), the release of a blocked job. Out:
    a worker's claim (active), TTL expiry inside the claim (failed/expired), cancel."""

    DELAYED = "delayed"
    """In: enqueue with a delay, a retry's backoff. Out: promoted to waiting by
    the claim once ``run_at`` has come, cancel."""

    ACTIVE = "active"
    """In: a worker's claim (attempts counted there). Out: the worker settles it
    (completed, delayed for a retry, failed, cancelled, or released to waiting),
    or the stall reaper returns it to waiting / fails it once its lease expired."""

    COMPLETED = "completed"
    """In: the worker, after the handler returned. Out: the retention cleaner."""

    FAILED = "failed"
    """Terminal; the job is in the dead-letter queue. In: the worker (error,
    timeout, invalid, unknown_task), the stall reaper (stalled), the claim
    (expired). Out: dead-letter delete/purge, the retention cleaner."""

    CANCELLED = "cancelled"
    """Terminal. In: ``app.cancel`` (waiting/delayed/blocked at once, active via the
    worker); a blocked job whose dependency failed (``dependency_failed``). Out:
    the retention cleaner."""


class DependencyPolicy(enum.StrEnum):
    """What a job does when a job it depends on fails or is cancelled."""

    CANCEL = "cancel"  # it is cancelled too, with reason dependency_failed (transitively)
    RUN = "run"  # it runs anyway once every dependency has finished


#: States a job can still leave by itself.
PENDING_STATES = frozenset({JobState.WAITING, JobState.DELAYED})
LIVE_STATES = frozenset({JobState.BLOCKED, JobState.WAITING, JobState.DELAYED, JobState.ACTIVE})
TERMINAL_STATES = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})
#: States an enqueue stores a job in: pending, blocked on its dependencies, or
#: cancelled at once because a dependency already failed (``dependency_failed``).
CREATED_STATES = PENDING_STATES | {JobState.BLOCKED, JobState.CANCELLED}

#: Every allowed state change; a unit test checks each backend-visible move against it.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.BLOCKED: frozenset({JobState.WAITING, JobState.DELAYED, JobState.CANCELLED}),
    JobState.WAITING: frozenset({JobState.ACTIVE, JobState.CANCELLED, JobState.FAILED}),
    JobState.DELAYED: frozenset({JobState.WAITING, JobState.CANCELLED}),
    JobState.ACTIVE: frozenset(
        {
            JobState.COMPLETED,
            JobState.DELAYED,
            JobState.FAILED,
            JobState.WAITING,
            JobState.CANCELLED,
        }
    ),
    JobState.COMPLETED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


class FailureReason(enum.StrEnum):
    """Why a job ended in ``failed``."""

    ERROR = "error"
    TIMEOUT = "timeout"
    STALLED = "stalled"
    EXPIRED = "expired"
    INVALID = "invalid"
    UNKNOWN_TASK = "unknown_task"
    DEPENDENCY_FAILED = "dependency_failed"
    """Carried by a *cancelled* job: a job it depended on failed or was cancelled."""


@dataclass(slots=True)
class ErrorInfo:
    """One attempt's error: what was raised, and where."""

    type: str
    message: str
    traceback: str = ""
    attempt: int = 0
    reason: str = FailureReason.ERROR.value
    at: float = 0.0
    traceparent: str | None = None
    """The W3C ``traceparent`` of the attempt's CONSUMER span (tracing on only):
    the next attempt's span links to it."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type,
            "message": self.message,
            "traceback": self.traceback,
            "attempt": self.attempt,
            "reason": self.reason,
            "at": self.at,
        }
        if self.traceparent is not None:
            out["traceparent"] = self.traceparent
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ErrorInfo:
        return cls(
            type=str(data.get("type", "")),
            message=str(data.get("message", "")),
            traceback=str(data.get("traceback", "")),
            attempt=int(data.get("attempt", 0)),
            reason=str(data.get("reason", FailureReason.ERROR.value)),
            at=float(data.get("at", 0.0)),
            traceparent=_str_or_none(data.get("traceparent")),
        )


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class JobSource(Protocol):
    """Where a job came from, so that ``job.refresh()`` and ``job.wait()`` can
    read it again (an app's runtime)."""

    async def get_job(self, job_id: str) -> Job | None: ...

    async def wait_for_job(
        self, job_id: str, timeout: float | None = None, poll: float = 0.05
    ) -> Job: ...


@dataclass(slots=True, eq=False)
class Job:
    """One run request of a task, as stored by a backend.

    Times are POSIX seconds on the backend's clock (G11). ``attempts`` counts
    claims, this run included (G5).
    """

    id: str
    task: str
    queue: str = "default"
    payload: JSON = field(default_factory=dict)
    state: JobState = JobState.WAITING
    priority: int = 0
    attempts: int = 0
    max_attempts: int = 3
    timeout: float | None = None
    run_at: float = 0.0
    created_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    expires_at: float | None = None
    #: The effective TTL in seconds (the smaller of the job's and its queue's at
    #: enqueue), or ``None``. Every wait gets it afresh: ``expires_at`` is re-set
    #: to the start of the wait + ``ttl`` each time the job (re)enters waiting.
    ttl: float | None = None
    lease_until: float | None = None
    lease_token: str | None = None
    worker_id: str | None = None
    stalls: int = 0
    progress: JSON = None
    result: JSON = None
    error: ErrorInfo | None = None
    errors: list[ErrorInfo] = field(default_factory=list)
    failure_reason: FailureReason | None = None
    idempotency_key: str | None = None
    tenant: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    retried_as: str | None = None
    retry_of: str | None = None
    cancel_requested: bool = False
    #: True when an enqueue found this job by its idempotency key and created nothing.
    duplicate: bool = False
    #: Set by a backend when a stored field could not be decoded (a corrupt row);
    #: the worker fails such a job as ``invalid`` instead of running it.
    decode_error: str | None = None
    #: The jobs this one waits for, in the order given (``ctx.dependency_results``).
    #: A tuple: no container of its own for the many jobs without dependencies
    #: (each one more object for the garbage collector to track).
    depends_on: tuple[str, ...] = ()
    on_dependency_failure: DependencyPolicy = DependencyPolicy.CANCEL
    #: The workflow this job belongs to (``app.start``), if any.
    workflow_id: str | None = None
    #: The key its task's ``key_concurrency`` counts running jobs by (``None``:
    #: the task's one shared group).
    concurrency_key: str | None = None
    #: The window its task's per-key rate limit counts starts in (``None``:
    #: the task's one shared window).
    rate_limit_key: str | None = None
    _source: JobSource | None = field(default=None, repr=False, compare=False)

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly view for the CLI and the HTTP API (no lease token)."""
        return {
            "id": self.id,
            "task": self.task,
            "queue": self.queue,
            "state": self.state.value,
            "payload": self.payload,
            "priority": self.priority,
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "timeout": self.timeout,
            "run_at": self.run_at,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "expires_at": self.expires_at,
            "ttl": self.ttl,
            "lease_until": self.lease_until,
            "worker_id": self.worker_id,
            "stalls": self.stalls,
            "progress": self.progress,
            "result": self.result,
            "error": self.error.to_dict() if self.error else None,
            "errors": [e.to_dict() for e in self.errors],
            "failure_reason": self.failure_reason.value if self.failure_reason else None,
            "idempotency_key": self.idempotency_key,
            "tenant": self.tenant,
            "metadata": self.metadata,
            "retried_as": self.retried_as,
            "retry_of": self.retry_of,
            "cancel_requested": self.cancel_requested,
            "depends_on": list(self.depends_on),
            "on_dependency_failure": self.on_dependency_failure.value,
            "workflow_id": self.workflow_id,
            "concurrency_key": self.concurrency_key,
            "rate_limit_key": self.rate_limit_key,
            "duplicate": self.duplicate,
        }

    def bind(self, source: JobSource) -> Job:
        """Remember where this job can be read again (returns the job)."""
        self._source = source
        return self

    async def refresh(self) -> Job:
        """Reload this job from its app's backend."""
        fresh = await self._require_source().get_job(self.id)
        if fresh is None:
            from conveyor.errors import JobNotFound

            raise JobNotFound(self.id)
        return fresh

    async def wait(self, timeout: float | None = None, poll: float = 0.05) -> JSON:
        """Wait until the job ends; return its result.

        Raises :class:`~conveyor.errors.JobFailed`, :class:`~conveyor.errors.JobCancelled`
        or :class:`TimeoutError`.
        """
        from conveyor.errors import JobCancelled, JobFailed

        job = await self._require_source().wait_for_job(self.id, timeout=timeout, poll=poll)
        if job.state is JobState.COMPLETED:
            return job.result
        if job.state is JobState.CANCELLED:
            raise JobCancelled(job)
        raise JobFailed(job)

    def _require_source(self) -> JobSource:
        if self._source is None:
            raise RuntimeError("this Job is not bound to a Conveyor app")
        return self._source

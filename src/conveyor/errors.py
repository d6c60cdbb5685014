"""Typed errors. Every error a user can meet derives from :class:`ConveyorError`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conveyor.job import Job


class ConveyorError(Exception):
    """Base class of every conveyor error."""


class ConfigurationError(ConveyorError, ValueError):
    """Invalid configuration; the message names the offending key."""


class BackendError(ConveyorError):
    """The backend could not be reached or refused an operation."""


class BackendUnavailable(BackendError):
    """The backend is down or unreachable; retry later."""


class NotReplicated(BackendError):
    """Fewer replicas than required acknowledged a write in time (Redis ``WAIT``
    mode). The write is on the primary; it may be lost if the primary fails now."""

    def __init__(self, message: str, acknowledged: int, required: int) -> None:
        super().__init__(message)
        self.acknowledged = acknowledged
        self.required = required


class MissingDependency(ConveyorError, ImportError):
    """A backend or feature needs an optional extra that is not installed."""


class EnqueueError(ConveyorError):
    """An enqueue was refused; nothing was stored."""


class QueueFull(EnqueueError):
    """The queue is at its ``max_size`` (backpressure). HTTP 429."""

    def __init__(self, queue: str, max_size: int) -> None:
        super().__init__(f"queue {queue!r} is full (max_size={max_size})")
        self.queue = queue
        self.max_size = max_size


class PayloadTooLarge(EnqueueError):
    """The encoded payload is over ``max_payload_bytes``."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"payload is {size} bytes, over the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class SerializationError(EnqueueError, TypeError):
    """A payload, result or metadata value is not JSON-serialisable."""


class InvalidWorkflow(EnqueueError, ValueError):
    """A workflow or ``depends_on`` that cannot run: a cycle, an unknown
    dependency id, or an unknown task. Nothing was stored."""


class ConcurrencyKeyError(EnqueueError, ValueError):
    """A task's ``concurrency_key`` function raised or returned something other
    than a non-empty string. Nothing was stored."""


class RateLimitKeyError(EnqueueError, ValueError):
    """A task's ``rate_limit_key`` function raised or returned something other
    than a non-empty string, or an enqueue's ``rate_limit_key`` names a window
    its task has no per-key rate limit for. Nothing was stored."""


class UnknownTask(ConveyorError, LookupError):
    """No handler is registered under this task name."""


class ValidationError(ConveyorError, ValueError):
    """A handler's ``validate`` refused a payload; the job fails as ``invalid``."""


class JobNotFound(ConveyorError, LookupError):
    """No job with this id."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job with id {job_id!r}")
        self.job_id = job_id


class InvalidStateError(ConveyorError):
    """The job is not in a state that allows this operation."""


class JobFailed(ConveyorError):
    """Raised by ``job.wait()`` when the job ended ``failed``."""

    def __init__(self, job: Job) -> None:
        err = job.error
        detail = f"{err.type}: {err.message}" if err else "no error recorded"
        reason = job.failure_reason.value if job.failure_reason else "unknown"
        super().__init__(f"job {job.id} failed ({reason}): {detail}")
        self.job = job


class JobCancelled(ConveyorError):
    """Raised by ``job.wait()`` when the job was cancelled."""

    def __init__(self, job: Job) -> None:
        super().__init__(f"job {job.id} was cancelled")
        self.job = job


class LeaseLost(ConveyorError):
    """The worker's lease on a job moved on (G4); its outcome was refused."""


class JobTimeout(ConveyorError, TimeoutError):
    """A handler ran past its job's timeout."""


class InvalidSchedule(ConfigurationError):
    """A schedule's cron, interval, time zone or options cannot be used; the
    message names the schedule and the problem."""


class InvalidQueueOptions(ConfigurationError):
    """``app.queue(...)`` options that cannot be used (a fairness other than
    ``"tenant"``, weights without fairness, a weight that is not a positive
    number, a tenant that is not a non-empty string); the message names the
    queue and the problem."""


class ScheduleNotFound(ConveyorError, LookupError):
    """No schedule with this name is stored."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no schedule named {name!r}")
        self.name = name

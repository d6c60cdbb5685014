"""conveyor: durable background jobs for Python."""

from __future__ import annotations

from conveyor.app import Conveyor
from conveyor.context import BatchContext, JobContext
from conveyor.errors import (
    BackendError,
    BackendUnavailable,
    ConcurrencyKeyError,
    ConfigurationError,
    ConveyorError,
    InvalidQueueOptions,
    InvalidSchedule,
    InvalidStateError,
    InvalidWorkflow,
    JobCancelled,
    JobFailed,
    JobNotFound,
    PayloadTooLarge,
    QueueFull,
    RateLimitKeyError,
    ScheduleNotFound,
    SerializationError,
    UnknownTask,
    ValidationError,
)
from conveyor.job import DependencyPolicy, ErrorInfo, FailureReason, Job, JobState
from conveyor.retry import Backoff
from conveyor.task import Handler, Priority, Task
from conveyor.workflow import Step, Workflow, WorkflowState, chain, chord, group

__version__ = "0.1.0.dev0"

__all__ = [
    "BackendError",
    "BackendUnavailable",
    "Backoff",
    "BatchContext",
    "ConcurrencyKeyError",
    "ConfigurationError",
    "Conveyor",
    "ConveyorError",
    "DependencyPolicy",
    "ErrorInfo",
    "FailureReason",
    "Handler",
    "InvalidQueueOptions",
    "InvalidSchedule",
    "InvalidStateError",
    "InvalidWorkflow",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobFailed",
    "JobNotFound",
    "JobState",
    "PayloadTooLarge",
    "Priority",
    "QueueFull",
    "RateLimitKeyError",
    "ScheduleNotFound",
    "SerializationError",
    "Step",
    "Task",
    "UnknownTask",
    "ValidationError",
    "Workflow",
    "WorkflowState",
    "__version__",
    "chain",
    "chord",
    "group",
]

"""A :class:`Job` from a SQL row: SQLite and PostgreSQL select the same job
columns in the same order (``JOB_FIELDS``), so one decoder serves both.

Jobs are built straight from the row: no dict rows, no per-column lookups by
name, and ``Job(...)`` called with positional arguments (half the cost of
keywords with this many fields; the field order is checked at import). JSON
columns go through the shared :func:`decode_fields`, so a corrupt row comes
back with ``decode_error`` instead of failing the read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from conveyor import serialization
from conveyor.backends.base import StallResult
from conveyor.backends.rows import decode_fields
from conveyor.job import DependencyPolicy, ErrorInfo, FailureReason, Job, JobState


class Row(Protocol):
    """A result row: a sqlite3 tuple, an asyncpg Record or a psycopg tuple."""

    def __getitem__(self, index: int, /) -> Any: ...

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...


STATES = {s.value: s for s in JobState}
_REASONS = {r.value: r for r in FailureReason}
_POLICIES = {p.value: p for p in DependencyPolicy}
_CANCEL = DependencyPolicy.CANCEL
#: Rows may carry the dependency columns (depends_on as JSON array text or an
#: array, on_dependency_failure, workflow_id) after the first 29; a backend that
#: does not store dependencies selects only those 29.
_DEPENDENCY_COLUMNS = 29

#: ``Job``'s fields in the order ``job_from_row`` and ``new_job`` pass them.
JOB_FIELDS = (
    "id",
    "task",
    "queue",
    "payload",
    "state",
    "priority",
    "attempts",
    "max_attempts",
    "timeout",
    "run_at",
    "created_at",
    "started_at",
    "finished_at",
    "expires_at",
    "ttl",
    "lease_until",
    "lease_token",
    "worker_id",
    "stalls",
    "progress",
    "result",
    "error",
    "errors",
    "failure_reason",
    "idempotency_key",
    "tenant",
    "metadata",
    "retried_as",
    "retry_of",
    "cancel_requested",
    "duplicate",
    "decode_error",
    "depends_on",
    "on_dependency_failure",
    "workflow_id",
    "concurrency_key",
    "rate_limit_key",
)
if tuple(f.name for f in dataclasses.fields(Job))[: len(JOB_FIELDS)] != JOB_FIELDS:
    raise RuntimeError(
        "conveyor.job.Job's fields changed order: update JOB_FIELDS and the positional "
        "Job(...) calls in conveyor/backends/sqlrows.py"
    )


def job_from_row(r: Row, key_at: int = 0, rate_key_at: int = 0) -> Job:
    """A job from a row in ``JOB_COLUMNS`` order (see queries.py); ``key_at``
    and ``rate_key_at`` are the positions of concurrency_key and rate_limit_key
    in the row when it has them (0: it has not)."""
    if r[25] is None and r[26] is None and r[27] is None and r[28] is None:
        # The common row on the hot path: a payload and nothing else to decode.
        try:
            payload = serialization.loads(r[24])
        except ValueError:
            pass  # decode_fields below names the problem
        else:
            return _job(r, payload, {}, None, None, None, [], None, key_at, rate_key_at)
    fields = decode_fields(r[24], r[25], r[26], r[27], r[28])
    return _job(
        r,
        fields.payload,
        fields.metadata,
        fields.result,
        fields.progress,
        fields.error,
        fields.errors,
        fields.problem,
        key_at,
        rate_key_at,
    )


def stall_result(rows: Iterable[Row]) -> StallResult:
    """What ``recover_stalled`` returns for the rows its statement changed:
    each job listed by the state it ended in."""
    result = StallResult()
    for row in rows:
        job = job_from_row(row)
        if job.state is JobState.WAITING:
            result.requeued.append(job)
        elif job.state is JobState.CANCELLED:
            result.cancelled.append(job)
        else:
            result.failed.append(job)
    return result


def _job(
    r: Row,
    payload: Any,
    metadata: dict[str, Any],
    result: Any,
    progress: Any,
    error: ErrorInfo | None,
    errors: list[ErrorInfo],
    problem: str | None,
    key_at: int,
    rate_key_at: int,
) -> Job:
    state = STATES.get(r[3])
    if state is None:
        problem = problem or f"stored state {r[3]!r} is not a job state"
        state = JobState.FAILED
    reason_value = r[18]
    reason = None if reason_value is None else _REASONS.get(reason_value, FailureReason.ERROR)
    depends_on: tuple[str, ...] = ()
    policy = _CANCEL
    workflow_id: str | None = None
    if len(r) > _DEPENDENCY_COLUMNS:
        stored = r[29]
        if stored is None:
            pass  # the common case: no dependencies
        elif isinstance(stored, list):  # an array column
            depends_on = tuple(stored)
        elif stored is not None:  # JSON array text
            try:
                depends_on = tuple(serialization.loads(stored))
            except ValueError:
                problem = problem or f"stored depends_on {stored!r} is not JSON"
        policy = _POLICIES.get(r[30], _CANCEL)
        workflow_id = r[31]
    # Positional, in JOB_FIELDS order.
    return Job(
        r[0],  # id
        r[1],  # task
        r[2],  # queue
        payload,
        state,
        r[4],  # priority
        r[5],  # attempts
        r[6],  # max_attempts
        r[7],  # timeout
        r[8],  # run_at
        r[9],  # created_at
        r[10],  # started_at
        r[11],  # finished_at
        r[12],  # expires_at
        r[13],  # ttl
        r[14],  # lease_until
        r[15],  # lease_token
        r[16],  # worker_id
        r[17],  # stalls
        progress,
        result,
        error,
        errors,
        reason,
        r[19],  # idempotency_key
        r[20],  # tenant
        metadata,
        r[21],  # retried_as
        r[22],  # retry_of
        bool(r[23]),  # cancel_requested
        False,  # duplicate
        problem,  # decode_error
        depends_on,
        policy,
        workflow_id,
        r[key_at] if key_at else None,  # concurrency_key
        r[rate_key_at] if rate_key_at else None,  # rate_limit_key
    )

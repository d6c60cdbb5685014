"""Rows (asyncpg records in ``JOB_COLUMNS`` order) to :class:`Job` values.

Jobs are built with positional arguments (the field order is checked at
import). Stored JSON goes through the shared :func:`decode_fields`, so a
corrupt row comes back with ``decode_error`` instead of failing the read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, Protocol

from conveyor import serialization
from conveyor.backends.rows import decode_fields
from conveyor.job import ErrorInfo, FailureReason, Job, JobState


class Row(Protocol):
    """A result row: an asyncpg Record, a psycopg tuple or a list."""

    def __getitem__(self, index: int, /) -> Any: ...

    def __iter__(self) -> Iterator[Any]: ...


STATES = {s.value: s for s in JobState}
_REASONS = {r.value: r for r in FailureReason}

#: ``Job``'s leading fields in the order ``_job`` passes them.
JOB_FIELDS = (
    "id", "task", "queue", "payload", "state", "priority", "attempts", "max_attempts",
    "timeout", "run_at", "created_at", "started_at", "finished_at", "expires_at", "ttl",
    "lease_until", "lease_token", "worker_id", "stalls", "progress", "result", "error",
    "errors", "failure_reason", "idempotency_key", "tenant", "metadata", "retried_as",
    "retry_of", "cancel_requested", "duplicate", "decode_error",
)  # fmt: skip
if tuple(f.name for f in dataclasses.fields(Job))[: len(JOB_FIELDS)] != JOB_FIELDS:
    raise RuntimeError(
        "conveyor.job.Job's fields changed order: update JOB_FIELDS and the positional "
        "Job(...) call in conveyor/backends/postgres/decode.py"
    )


def job_from_row(r: Row) -> Job:
    """A job from a row of the jobs table (its columns in JOB_COLUMNS order)."""
    if r[25] is None and r[26] is None and r[27] is None and r[28] is None:
        # The common row on the hot path: a payload and nothing else to decode.
        try:
            return _job(r, serialization.loads(r[24]), {}, None, None, None, [], None)
        except ValueError:
            pass  # decode_fields below names the problem
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
    )


def _job(
    r: Row,
    payload: Any,
    metadata: dict[str, Any],
    result: Any,
    progress: Any,
    error: ErrorInfo | None,
    errors: list[ErrorInfo],
    problem: str | None,
) -> Job:
    state = STATES.get(r[3])
    if state is None:
        problem = problem or f"stored state {r[3]!r} is not a job state"
        state = JobState.FAILED
    reason_value = r[18]
    reason = None if reason_value is None else _REASONS.get(reason_value, FailureReason.ERROR)
    return Job(
        r[0], r[1], r[2], payload, state, r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11],
        r[12], r[13], r[14], r[15], r[16], r[17], progress, result, error, errors, reason,
        r[19], r[20], metadata, r[21], r[22], bool(r[23]), False, problem,
    )  # fmt: skip


def claim_order(job: Job) -> tuple[int, float, str]:
    """Sort key of a job in claim order: priority DESC, run_at, id."""
    return (-job.priority, job.run_at, job.id)

"""Rows (plain tuples in ``JOB_COLUMNS`` order) to :class:`Job` values.

Jobs are built straight from tuples: no dict rows, no per-column lookups by
name. JSON columns go through the shared :func:`decode_fields`, so a corrupt
row comes back with ``decode_error`` instead of failing the read.
"""

from __future__ import annotations

from typing import Any

from conveyor import serialization
from conveyor.backends.rows import decode_fields
from conveyor.job import ErrorInfo, FailureReason, Job, JobState

Row = tuple[Any, ...]

_STATES = {s.value: s for s in JobState}
_REASONS = {r.value: r for r in FailureReason}


def job_from_row(r: Row) -> Job:
    """A job from a row in ``JOB_COLUMNS`` order (see queries.py)."""
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
    state = _STATES.get(r[3])
    if state is None:
        problem = problem or f"stored state {r[3]!r} is not a job state"
        state = JobState.FAILED
    reason_value = r[18]
    reason = None if reason_value is None else _REASONS.get(reason_value, FailureReason.ERROR)
    return Job(
        id=r[0],
        task=r[1],
        queue=r[2],
        payload=payload,
        state=state,
        priority=r[4],
        attempts=r[5],
        max_attempts=r[6],
        timeout=r[7],
        run_at=r[8],
        created_at=r[9],
        started_at=r[10],
        finished_at=r[11],
        expires_at=r[12],
        ttl=r[13],
        lease_until=r[14],
        lease_token=r[15],
        worker_id=r[16],
        stalls=r[17],
        progress=progress,
        result=result,
        error=error,
        errors=errors,
        failure_reason=reason,
        idempotency_key=r[19],
        tenant=r[20],
        metadata=metadata,
        retried_as=r[21],
        retry_of=r[22],
        cancel_requested=bool(r[23]),
        decode_error=problem,
    )


def claim_order(r: Row) -> tuple[int, float, str]:
    """Sort key of a job row in claim order: priority DESC, run_at, id."""
    return (-r[4], r[8], r[0])

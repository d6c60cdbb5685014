"""PostgreSQL rows (asyncpg records in ``JOB_COLUMNS`` order) to :class:`Job`
values through the decoder shared with SQLite (:mod:`conveyor.backends.sqlrows`;
the dependency columns follow the first 29, then has_dependents, dispatched_at,
concurrency_key and rate_limit_key, the columns later migrations added), and
the claim order of decoded jobs."""

from __future__ import annotations

from conveyor.backends.sqlrows import JOB_FIELDS, STATES, Row
from conveyor.backends.sqlrows import job_from_row as _shared_job_from_row
from conveyor.job import Job

__all__ = ["JOB_FIELDS", "STATES", "Row", "claim_order", "job_from_row"]

#: Position of ``concurrency_key`` in a ``j.*`` row (added by version 6).
CONCURRENCY_KEY = 34
#: Position of ``rate_limit_key`` in a ``j.*`` row (added by the rate-limit-keys
#: migration; tests/migrations checks both positions against the table).
RATE_LIMIT_KEY = 35


def job_from_row(r: Row) -> Job:
    """A job from a ``j.*`` row (or a shorter one, which has no key)."""
    if len(r) > RATE_LIMIT_KEY:
        return _shared_job_from_row(r, CONCURRENCY_KEY, RATE_LIMIT_KEY)
    return _shared_job_from_row(r, CONCURRENCY_KEY if len(r) > CONCURRENCY_KEY else 0)


def claim_order(job: Job) -> tuple[int, float, str]:
    """Sort key of a job in claim order: priority DESC, run_at, id."""
    return (-job.priority, job.run_at, job.id)

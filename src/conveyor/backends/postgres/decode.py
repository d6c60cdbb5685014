"""PostgreSQL rows (asyncpg records in ``JOB_COLUMNS`` order) to :class:`Job`
values through the decoder shared with SQLite (:mod:`conveyor.backends.sqlrows`;
the dependency columns follow the first 29), and the claim order of decoded jobs."""

from __future__ import annotations

from conveyor.backends.sqlrows import JOB_FIELDS, STATES, Row, job_from_row
from conveyor.job import Job

__all__ = ["JOB_FIELDS", "STATES", "Row", "claim_order", "job_from_row"]


def claim_order(job: Job) -> tuple[int, float, str]:
    """Sort key of a job in claim order: priority DESC, run_at, id."""
    return (-job.priority, job.run_at, job.id)

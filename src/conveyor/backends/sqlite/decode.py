"""SQLite rows (plain tuples in ``JOB_COLUMNS`` order) to :class:`Job` values:
the decoder shared with PostgreSQL (:mod:`conveyor.backends.sqlrows`; the
dependency columns follow the first 29, then concurrency_key and
rate_limit_key, the columns the flow-control and rate-limit-keys migrations added), plus SQLite's
claim order on raw rows."""

from __future__ import annotations

from typing import Any

from conveyor.backends.sqlite.queries import JOB_COLUMNS
from conveyor.backends.sqlrows import JOB_FIELDS
from conveyor.backends.sqlrows import job_from_row as _shared_job_from_row
from conveyor.job import Job

__all__ = ["JOB_FIELDS", "Row", "claim_order", "job_from_row"]

Row = tuple[Any, ...]

#: Position of ``concurrency_key`` in a ``JOB_COLUMNS`` row (see queries.py).
CONCURRENCY_KEY = [c.strip() for c in JOB_COLUMNS.split(",")].index("concurrency_key")
#: Position of ``rate_limit_key`` (the rate-limit-keys migration added it).
RATE_LIMIT_KEY = [c.strip() for c in JOB_COLUMNS.split(",")].index("rate_limit_key")


def job_from_row(r: Row) -> Job:
    """A job from a row in ``JOB_COLUMNS`` order (then maybe has_dependents)."""
    return _shared_job_from_row(r, CONCURRENCY_KEY, RATE_LIMIT_KEY)


def claim_order(r: Row) -> tuple[int, float, str]:
    """Sort key of a job row in claim order: priority DESC, run_at, id."""
    return (-r[4], r[8], r[0])

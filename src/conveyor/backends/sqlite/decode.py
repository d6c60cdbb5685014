"""SQLite rows (plain tuples in ``JOB_COLUMNS`` order) to :class:`Job` values:
the decoder shared with PostgreSQL (:mod:`conveyor.backends.sqlrows`), plus
SQLite's claim order on raw rows."""

from __future__ import annotations

from typing import Any

from conveyor.backends.sqlrows import JOB_FIELDS, job_from_row

__all__ = ["JOB_FIELDS", "Row", "claim_order", "job_from_row"]

Row = tuple[Any, ...]


def claim_order(r: Row) -> tuple[int, float, str]:
    """Sort key of a job row in claim order: priority DESC, run_at, id."""
    return (-r[4], r[8], r[0])

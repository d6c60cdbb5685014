"""PostgreSQL rows (asyncpg records in ``JOB_COLUMNS`` order) to :class:`Job`
values: the decoder shared with SQLite (:mod:`conveyor.backends.sqlrows`), plus
the dependency columns only PostgreSQL rows carry here, and the claim order of
decoded jobs."""

from __future__ import annotations

import dataclasses

from conveyor.backends import sqlrows
from conveyor.backends.sqlrows import JOB_FIELDS, STATES, Row
from conveyor.job import DependencyPolicy, Job

__all__ = ["JOB_FIELDS", "STATES", "Row", "claim_order", "job_from_row"]

#: The Job fields right after JOB_FIELDS, from the columns after ``errors``
#: (depends_on, on_dependency_failure, workflow_id; then has_dependents, not a
#: Job field). enqueue.py passes them positionally too.
DEPENDENCY_FIELDS = ("depends_on", "on_dependency_failure", "workflow_id")
_FIELDS = tuple(f.name for f in dataclasses.fields(Job))
if _FIELDS[len(JOB_FIELDS) : len(JOB_FIELDS) + 3] != DEPENDENCY_FIELDS:
    raise RuntimeError(
        "conveyor.job.Job's fields changed order: update DEPENDENCY_FIELDS and the "
        "positional Job(...) call in conveyor/backends/postgres/enqueue.py"
    )
_RUN = DependencyPolicy.RUN.value


def job_from_row(r: Row) -> Job:
    """A job from a row in ``JOB_COLUMNS`` order (see queries.py)."""
    job = sqlrows.job_from_row(r)
    if r[29] is not None or r[30] is not None or r[31] is not None:
        job.depends_on = list(r[29] or ())
        if r[30] == _RUN:  # NULL: the default, cancel
            job.on_dependency_failure = DependencyPolicy.RUN
        job.workflow_id = r[31]
    return job


def claim_order(job: Job) -> tuple[int, float, str]:
    """Sort key of a job in claim order: priority DESC, run_at, id."""
    return (-job.priority, job.run_at, job.id)

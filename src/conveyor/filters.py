"""Turns the filters users write (``state="failed", task=...``) into a
:class:`~conveyor.backends.base.JobFilter` for the backend."""

from __future__ import annotations

from collections.abc import Sequence

from conveyor.backends.base import JobFilter
from conveyor.job import FailureReason, JobState


def job_filter(
    state: JobState | str | Sequence[JobState | str] | None = None,
    *,
    queue: str | None = None,
    task: str | None = None,
    tenant: str | None = None,
    reason: FailureReason | str | None = None,
    finished_before: float | None = None,
) -> JobFilter:
    states: list[JobState] | None
    if state is None:
        states = None
    elif isinstance(state, JobState | str):
        states = [JobState(state)]
    else:
        states = [JobState(s) for s in state]
    return JobFilter(
        states=states,
        queue=queue,
        task=task,
        tenant=tenant,
        failure_reason=FailureReason(reason) if reason else None,
        finished_before=finished_before,
    )

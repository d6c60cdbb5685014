"""Assertions on what an app has enqueued: ``assert_enqueued``, ``refute_enqueued``,
``enqueued_jobs``.

They read the app's store through its public API (``app.list_jobs``), so they work
on every backend; ``memory://`` makes them instant. Matching rules:

- ``task``, ``queue``, ``tenant`` and any other :class:`~conveyor.job.Job` field
  given by name (``priority=10``, ``idempotency_key="k"``) must be equal;
- ``payload`` is a *subset* match, as Oban.Testing matches ``args``: every key
  it names must be in the job's payload with an equal value, recursively for
  nested objects; lists and scalars must be equal as a whole. A payload that
  is not an object must equal the job's payload. The expected payload goes
  through JSON first, so a tuple matches the list the job holds;
- ``metadata`` is a subset match the same way;
- ``state`` (one or several) defaults to ``waiting`` and ``delayed``: jobs
  enqueued and not yet run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from conveyor import serialization
from conveyor.job import PENDING_STATES, Job, JobState

if TYPE_CHECKING:
    from conveyor.app import Conveyor

StateFilter = JobState | str | Sequence[JobState | str]

_PAGE = 500
#: How many jobs a failure message lists before it says "and N more".
_SHOWN = 20
_JOB_FIELDS = frozenset(f.name for f in fields(Job) if not f.name.startswith("_"))
#: Filters matched in the store, not in Python.
_STORE_FILTERS = ("queue", "tenant")
_NOT_SET: Any = object()


def _states(state: StateFilter | None) -> list[JobState]:
    if state is None:
        return sorted(PENDING_STATES)
    if isinstance(state, JobState | str):
        return [JobState(state)]
    return [JobState(each) for each in state]


def _as_json(value: Any) -> Any:
    """What a job would hold for ``value`` after the JSON round trip of enqueue."""
    return serialization.loads(serialization.dumps(value))


def is_subset(expected: Any, actual: Any) -> bool:
    """True when every key of ``expected`` (recursively, for objects) is in
    ``actual`` with an equal value; anything but an object must be equal."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            key in actual and is_subset(value, actual[key]) for key, value in expected.items()
        )
    return bool(expected == actual)


def _check_names(filters: Iterable[str]) -> None:
    unknown = sorted(set(filters) - _JOB_FIELDS)
    if unknown:
        raise TypeError(f"no Job field named {', '.join(unknown)} to filter on")


def _matches(job: Job, payload: Any, metadata: Any, exact: dict[str, Any]) -> bool:
    if payload is not _NOT_SET and not is_subset(payload, job.payload):
        return False
    if metadata is not _NOT_SET and not is_subset(metadata, job.metadata):
        return False
    return all(getattr(job, name) == value for name, value in exact.items())


async def _listed(
    app: Conveyor, task: str | None, states: list[JobState], store: dict[str, Any]
) -> list[Job]:
    jobs: list[Job] = []
    while True:
        page = await app.list_jobs(states, task=task, limit=_PAGE, offset=len(jobs), **store)
        jobs.extend(page)
        if len(page) < _PAGE:
            return jobs


async def enqueued_jobs(
    app: Conveyor,
    task: str | None = None,
    *,
    payload: Any = _NOT_SET,
    state: StateFilter | None = None,
    metadata: dict[str, Any] | None = None,
    **filters: Any,
) -> list[Job]:
    """The app's jobs that match (see the module's rules), oldest first."""
    _check_names(filters)
    store = {name: filters.pop(name) for name in _STORE_FILTERS if name in filters}
    jobs = await _listed(app, task, _states(state), store)
    wanted = _NOT_SET if payload is _NOT_SET else _as_json(payload)
    wanted_metadata = _NOT_SET if metadata is None else _as_json(metadata)
    found = [job for job in jobs if _matches(job, wanted, wanted_metadata, filters)]
    return sorted(found, key=lambda job: (job.created_at, job.id))


def _describe_query(task: str | None, payload: Any, filters: dict[str, Any]) -> str:
    parts = [] if task is None else [f"task={task!r}"]
    if payload is not _NOT_SET:
        parts.append(f"payload={payload!r}")
    parts += [f"{name}={value!r}" for name, value in filters.items() if value is not None]
    return ", ".join(parts) or "any job"


def _describe(job: Job) -> str:
    extra = "".join(
        f" {name}={value!r}"
        for name, value in (
            ("tenant", job.tenant),
            ("priority", job.priority or None),
            ("metadata", job.metadata or None),
        )
        if value is not None
    )
    return (
        f"  {job.task} queue={job.queue} state={job.state.value}{extra} "
        f"payload={job.payload!r} id={job.id}"
    )


def _listing(jobs: list[Job], what: str) -> str:
    if not jobs:
        return f"{what}: none"
    lines = [f"{what} ({len(jobs)}):", *(_describe(job) for job in jobs[:_SHOWN])]
    if len(jobs) > _SHOWN:
        lines.append(f"  ... and {len(jobs) - _SHOWN} more")
    return "\n".join(lines)


async def assert_enqueued(
    app: Conveyor,
    task: str | None = None,
    *,
    payload: Any = _NOT_SET,
    state: StateFilter | None = None,
    metadata: dict[str, Any] | None = None,
    **filters: Any,
) -> Job:
    """The oldest matching job; raises :class:`AssertionError` listing what
    *is* enqueued (in the states asked for) when no job matches."""
    found = await enqueued_jobs(
        app, task, payload=payload, state=state, metadata=metadata, **filters
    )
    if found:
        return found[0]
    states = _states(state)
    present = await _listed(app, None, states, {})
    query = _describe_query(task, payload, {"metadata": metadata, **filters})
    names = "/".join(each.value for each in states)
    raise AssertionError(
        f"no {names} job matches {query}\n"
        + _listing(sorted(present, key=lambda job: job.created_at), f"{names} jobs")
    )


async def refute_enqueued(
    app: Conveyor,
    task: str | None = None,
    *,
    payload: Any = _NOT_SET,
    state: StateFilter | None = None,
    metadata: dict[str, Any] | None = None,
    **filters: Any,
) -> None:
    """Raises :class:`AssertionError`, listing them, when any job matches."""
    found = await enqueued_jobs(
        app, task, payload=payload, state=state, metadata=metadata, **filters
    )
    if found:
        query = _describe_query(task, payload, {"metadata": metadata, **filters})
        raise AssertionError(
            f"expected no job to match {query}\n" + _listing(found, "matching jobs")
        )

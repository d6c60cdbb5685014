"""Which dependents a dead-letter retry resumes (``Backend.retry_failed``).

The backends find the jobs cancelled ``dependency_failed`` downstream of the
retried job, each its own way; the choice of which of them go back to
``blocked`` is the same everywhere, so it lives here (Redis's Lua mirrors it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: States of a dependency that cancel its dependents (policy cancel).
FAILED_STATES = frozenset({"failed", "cancelled"})
#: States a dependency no longer leaves: nothing will resolve a job waiting on it.
FINISHED_STATES = FAILED_STATES | {"completed"}


def resumed_dependents(
    original: str, cancelled: Mapping[str, Sequence[str]], states: Mapping[str, str]
) -> list[str]:
    """The jobs of ``cancelled`` to resume, dependencies before dependents.

    ``cancelled`` maps every job cancelled ``dependency_failed`` that depends on
    ``original``, directly or through such jobs, to its ``depends_on``;
    ``states`` holds the state of each job those name (a missing one is gone,
    which only a finished job can be). One resumes when each of its
    dependencies is the original, a resumed job, or did not fail: a job that
    also waits on another failed job stays cancelled, as do its dependents (it
    would stay blocked for good otherwise).
    """
    resumed: dict[str, None] = {original: None}
    progress = True
    while progress:
        progress = False
        for job_id, deps in cancelled.items():
            if job_id in resumed:
                continue
            if all(d in resumed or states.get(d) not in FAILED_STATES for d in deps):
                resumed[job_id] = None
                progress = True
    return [job_id for job_id in resumed if job_id != original]


def replace_dependency(depends_on: Sequence[str], original: str, copy: str) -> list[str]:
    """``depends_on`` with the retried job's id swapped for its copy's."""
    return [copy if d == original else d for d in depends_on]

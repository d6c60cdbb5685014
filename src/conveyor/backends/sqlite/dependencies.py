"""Dependencies between jobs (``NewJob.depends_on``) on SQLite: the state a new
job starts in, and what happens to blocked jobs when what they wait for ends.

Both run inside the caller's transaction, in the writer's thread, so a job
that finishes and the dependents it releases or cancels commit together; the
single writer makes each resolution happen exactly once. A blocked job's
unfinished dependencies are rows of ``job_dependencies``; a dependency carries
``has_dependents``, so the operations that finish jobs (settle, cancel, stall
recovery, TTL expiry in the claim) call :func:`resolve_dependents` only for
jobs that some blocked job waits for.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from conveyor.backends.base import NewJob
from conveyor.backends.sqlite.decode import Row
from conveyor.backends.sqlite.queries import HAS_DEPENDENTS, Q, json_param
from conveyor.errors import InvalidWorkflow
from conveyor.job import DependencyPolicy, JobState

_CANCEL = DependencyPolicy.CANCEL
_COMPLETED = JobState.COMPLETED.value
_FAILED = frozenset({JobState.FAILED.value, JobState.CANCELLED.value})
_ENDED = _FAILED | {_COMPLETED}

#: (job id, whether it failed or was cancelled) of a job that just finished.
Finished = tuple[str, bool]


def in_workflow(nj: NewJob) -> bool:
    """Whether a new job has anything the plain inserts do not store."""
    return bool(nj.depends_on) or nj.workflow_id is not None or nj.on_dependency_failure != _CANCEL


class DependencyPlan:
    """The dependencies of one enqueue batch: where each new job starts, and the
    ``job_dependencies`` rows and flags to write once the batch is inserted."""

    def __init__(self, conn: sqlite3.Connection, jobs: Sequence[NewJob]) -> None:
        wanted = sorted({dep_id for nj in jobs for dep_id in nj.depends_on})
        # id -> state of every job a dependency may name: the stored ones now,
        # and each job of the batch once it is planned (an earlier one only).
        self.states: dict[str, str] = {}
        if wanted:
            rows = conn.execute(Q.dependency_states, {"ids": json_param(wanted)}).fetchall()
            self.states = {job_id: state for job_id, state in rows}
        self.edges: list[tuple[str, str]] = []  # (dependency id, blocked job id)

    def start_state(self, nj: NewJob, usual: JobState) -> JobState:
        """Where ``nj`` starts: ``usual`` (waiting/delayed) when its dependencies
        all completed (or finished, under policy run), cancelled when one failed
        or was cancelled (policy cancel), else blocked. Raises
        :class:`InvalidWorkflow` for an id neither stored nor earlier in the batch."""
        state = usual
        if nj.depends_on:
            failed = False
            unfinished: list[str] = []
            for dep_id in nj.depends_on:
                dep_state = self.states.get(dep_id)
                if dep_state is None:
                    raise InvalidWorkflow(f"job {nj.id} depends on {dep_id}, which does not exist")
                if dep_state == _COMPLETED:
                    continue
                if dep_state in _FAILED:
                    failed = True
                else:
                    unfinished.append(dep_id)
            if failed and nj.on_dependency_failure == _CANCEL:
                state = JobState.CANCELLED
            elif unfinished:
                state = JobState.BLOCKED
                self.edges.extend((dep_id, nj.id) for dep_id in unfinished)
        self.states[nj.id] = state.value
        return state

    def write(self, conn: sqlite3.Connection) -> None:
        """After the batch's inserts: record what the blocked jobs wait for, and
        flag those dependencies so that finishing them resolves their dependents."""
        if not self.edges:
            return
        conn.executemany(Q.add_dependencies, self.edges)
        waited_for = sorted({dep_id for dep_id, _ in self.edges})
        conn.execute(Q.mark_has_dependents, {"ids": json_param(waited_for)})


def finished_with_dependents(rows: Sequence[Row]) -> list[Finished]:
    """The jobs among ``rows`` (JOB_COLUMNS, then has_dependents) that ended
    and that blocked jobs wait for."""
    return [(r[0], r[3] in _FAILED) for r in rows if r[HAS_DEPENDENTS] and r[3] in _ENDED]


def resolve_dependents(
    conn: sqlite3.Connection, finished: Sequence[Finished], now: float
) -> set[str]:
    """The jobs of ``finished`` just ended: cancel (transitively, policy cancel)
    the blocked jobs waiting for one that failed or was cancelled, then release
    the blocked jobs that wait for nothing any more. Three statements whatever
    the number of jobs or the length of a chain. Returns the queues that got a
    job to wait in (waiting or delayed), to wake their workers."""
    ended = [job_id for job_id, _ in finished]
    failed = [job_id for job_id, bad in finished if bad]
    if failed:
        params: dict[str, Any] = {"failed": json_param(failed), "now": now}
        ended.extend(r[0] for r in conn.execute(Q.cancel_dependents, params).fetchall())
    taken = conn.execute(Q.take_dependents, {"ids": json_param(ended)}).fetchall()
    if not taken:
        return set()
    candidates = sorted({r[0] for r in taken})
    params = {"ids": json_param(candidates), "now": now}
    released = conn.execute(Q.release_dependents, params).fetchall()
    return {queue for queue, _ in released}

"""Acting on jobs, queues, circuits and workers in memory: cancel, retry,
delete and purge; queue settings; circuit resets; worker heartbeats."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from conveyor.backends.base import (
    CircuitInfo,
    CircuitState,
    JobFilter,
    QueueInfo,
    WorkerInfo,
    earlier_retry,
)
from conveyor.backends.memory.reads import select
from conveyor.backends.memory.store import Row, Store, deadline, to_job
from conveyor.backends.resume import FINISHED_STATES, replace_dependency, resumed_dependents
from conveyor.errors import BackendError, InvalidStateError, JobNotFound
from conveyor.job import FailureReason, Job, JobState


# -- jobs ------------------------------------------------------------------
def cancel_job(store: Store, job_id: str) -> Job | None:
    row = store.jobs.get(job_id)
    if row is None:
        return None
    if row.state in (JobState.WAITING, JobState.DELAYED, JobState.BLOCKED):
        row.finished_at = store.now()
        store.move(row, JobState.CANCELLED)
    elif row.state is JobState.ACTIVE:
        row.cancel_requested = True
    return to_job(row)


def retry_failed(store: Store, job_id: str, new_id: str) -> Job:
    row = store.jobs.get(job_id)
    if row is None:
        raise JobNotFound(job_id)
    if row.state is not JobState.FAILED:
        raise InvalidStateError(f"job {job_id} is {row.state.value}, not failed")
    if row.retried_as is not None:
        earlier = store.jobs.get(row.retried_as)
        return earlier_retry(job_id, row.retried_as, [to_job(earlier)] if earlier else [])
    if new_id in store.jobs:
        raise BackendError(f"a job with id {new_id!r} already exists")
    now = store.now()
    copy = Row(
        id=new_id,
        task=row.task,
        queue=row.queue,
        payload=row.payload,
        state=JobState.WAITING,
        priority=row.priority,
        max_attempts=row.max_attempts,
        timeout=row.timeout,
        run_at=now,
        created_at=now,
        ttl=row.ttl,
        expires_at=deadline(now, row.ttl),
        idempotency_key=None,
        tenant=row.tenant,
        metadata=row.metadata,
        retry_of=job_id,
        depends_on=row.depends_on,
        on_dependency_failure=row.on_dependency_failure,
        workflow_id=row.workflow_id,
        concurrency_key=row.concurrency_key,
        rate_limit_key=row.rate_limit_key,
    )
    store.insert(copy)
    row.retried_as = new_id
    _resume_dependents(store, job_id, copy)
    store.notify([copy.queue])
    return to_job(copy)


def _resume_dependents(store: Store, original: str, copy: Row) -> None:
    """The jobs cancelled ``dependency_failed`` downstream of ``original`` go back
    to blocked, waiting on ``copy`` instead (see :mod:`conveyor.backends.resume`)."""
    waiting_on: dict[str, list[Row]] = {}
    for cancelled_id in store.by_state[JobState.CANCELLED]:
        cancelled = store.jobs[cancelled_id]
        if cancelled.failure_reason is FailureReason.DEPENDENCY_FAILED:
            for dep_id in cancelled.depends_on:
                waiting_on.setdefault(dep_id, []).append(cancelled)
    found: dict[str, Row] = {}
    frontier = [original]
    while frontier:
        for row in waiting_on.get(frontier.pop(), ()):
            if row.id not in found:
                found[row.id] = row
                frontier.append(row.id)
    if not found:
        return
    states = {
        dep_id: dep.state.value
        for row in found.values()
        for dep_id in row.depends_on
        if (dep := store.jobs.get(dep_id)) is not None
    }
    for job_id in resumed_dependents(original, {i: r.depends_on for i, r in found.items()}, states):
        row = found[job_id]
        row.depends_on = tuple(replace_dependency(row.depends_on, original, copy.id))
        row.failure_reason = None
        row.finished_at = None
        store.move(row, JobState.BLOCKED)
        for dep_id in row.depends_on:
            dep = store.jobs.get(dep_id)
            if dep is not None and dep.state.value not in FINISHED_STATES:
                if dep.dependents is None:
                    dep.dependents = []
                dep.dependents.append(row.id)


def delete_jobs(store: Store, job_ids: Sequence[str]) -> int:
    deleted = 0
    for job_id in dict.fromkeys(job_ids):
        row = store.jobs.get(job_id)
        if row is not None and row.state is not JobState.ACTIVE:
            store.remove(row)
            deleted += 1
    return deleted


def purge_jobs(store: Store, where: JobFilter) -> int:
    doomed = [row for row in select(store, where) if row.state is not JobState.ACTIVE]
    for row in doomed:
        store.remove(row)
    return len(doomed)


# -- queues and circuits ---------------------------------------------------
def configure_queue(store: Store, info: QueueInfo) -> None:
    stored = store.queues.get(info.name)
    was_fair = store.is_fair(info.name)
    paused = stored.paused if stored is not None else False
    store.queues[info.name] = replace(info, paused=paused, weights=dict(info.weights))
    if store.is_fair(info.name) != was_fair:
        store.reindex_waiting(info.name)
        store.notify([info.name])


def set_queue_paused(store: Store, name: str, paused: bool) -> None:
    info = store.queues.setdefault(name, QueueInfo(name))
    info.paused = paused
    if not paused:
        store.notify([name])


def list_circuits(store: Store) -> list[CircuitInfo]:
    return [
        CircuitInfo(task, c.state, c.failures, c.open_until)
        for task, c in sorted(store.circuits.items())
    ]


def reset_circuit(store: Store, task: str) -> None:
    circuit = store.circuits.get(task)
    if circuit is not None:
        circuit.state = CircuitState.CLOSED
        circuit.failures = 0
        circuit.open_until = None
        store.notify(everyone=True)


def clear_circuit_failures(store: Store, task: str | None) -> None:
    circuits = store.circuits.items() if task is None else [(task, store.circuits.get(task))]
    for _, circuit in circuits:
        if circuit is not None and circuit.state is CircuitState.CLOSED:
            circuit.failures = 0


# -- workers ---------------------------------------------------------------
def record_heartbeat(store: Store, worker: WorkerInfo) -> None:
    store.workers[worker.id] = replace(worker, queues=list(worker.queues), last_seen=store.now())


def list_workers(store: Store) -> list[WorkerInfo]:
    return [replace(w, queues=list(w.queues)) for _, w in sorted(store.workers.items())]


def remove_worker(store: Store, worker_id: str) -> None:
    store.workers.pop(worker_id, None)


def prune_workers(store: Store, older_than: float) -> int:
    cutoff = store.now() - older_than
    gone = [wid for wid, w in store.workers.items() if w.last_seen < cutoff]
    for wid in gone:
        del store.workers[wid]
    return len(gone)

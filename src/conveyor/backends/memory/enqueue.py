"""Enqueue in memory: new rows, idempotency keys and queue size limits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from conveyor.backends.base import NewJob
from conveyor.backends.memory.store import IdempotencyKey, Row, Store, deadline, to_job
from conveyor.errors import BackendError, InvalidWorkflow, QueueFull
from conveyor.job import PENDING_STATES, TERMINAL_STATES, FailureReason, Job, JobState


@dataclass(slots=True)
class _Debounce:
    """A debounced enqueue that found its key's unstarted job: replace and postpone."""

    row: Row
    new: NewJob


def enqueue_jobs(store: Store, jobs: Sequence[NewJob]) -> list[Job]:
    now = store.now()
    # (row, is_new), a remembered key, or a debounce of an unstarted job
    plan: list[tuple[Row, bool] | IdempotencyKey | _Debounce] = []
    in_batch: dict[str, Row] = {}
    new_ids: set[str] = set()
    added: dict[str, int] = {}
    for new in jobs:
        key = new.idempotency_key
        if key is not None:
            if key in in_batch:
                found = in_batch[key]
                plan.append(_Debounce(found, new) if new.debounce else (found, False))
                continue
            known = store.keys.get(key)
            if known is not None and now < known.expires_at:
                existing = store.jobs.get(known.job_id)
                if not new.debounce:
                    plan.append((existing, False) if existing is not None else known)
                    continue
                if existing is not None and existing.state in PENDING_STATES:
                    plan.append(_Debounce(existing, new))
                    continue
                # Started or finished: the debounced enqueue makes a new job.
        if new.id in store.jobs or new.id in new_ids:
            raise BackendError(f"a job with id {new.id!r} already exists")
        for dep_id in new.depends_on:
            if dep_id not in store.jobs and dep_id not in new_ids:
                raise InvalidWorkflow(f"job {new.id} depends on {dep_id}, which does not exist")
        new_ids.add(new.id)
        if new.debounce:
            run_at = now + new.debounce
        else:
            run_at = new.run_at if new.run_at is not None else now + new.delay
        ttl = store.effective_ttl(new.ttl, new.queue)
        row = Row(
            id=new.id,
            task=new.task,
            queue=new.queue,
            payload=bytes(new.payload),
            state=JobState.DELAYED if run_at > now else JobState.WAITING,
            priority=new.priority,
            max_attempts=new.max_attempts,
            timeout=new.timeout,
            run_at=run_at,
            created_at=now,
            ttl=ttl,
            expires_at=deadline(run_at, ttl),
            idempotency_key=key,
            tenant=new.tenant,
            metadata=bytes(new.metadata) if new.metadata is not None else None,
            retry_of=new.retry_of,
            depends_on=tuple(new.depends_on),
            on_dependency_failure=new.on_dependency_failure,
            workflow_id=new.workflow_id,
            concurrency_key=new.concurrency_key,
            rate_limit_key=new.rate_limit_key,
        )
        plan.append((row, True))
        added[new.queue] = added.get(new.queue, 0) + 1
        if key is not None:
            in_batch[key] = row
    for queue, count in added.items():
        info = store.queues.get(queue)
        if (
            info is not None
            and info.max_size is not None
            and (store.pending_count(queue) + count > info.max_size)
        ):
            raise QueueFull(queue, info.max_size)
    # Validated: from here on nothing can fail, so the batch is all or nothing.
    ttl_of = {new.id: new.idempotency_ttl for new in jobs}
    woken: set[str] = set()
    timer = False
    for item in plan:
        if isinstance(item, _Debounce):
            _postpone(store, item, now)
            timer = True
        elif isinstance(item, tuple) and item[1]:
            row = item[0]
            if row.depends_on:
                _wait_for_dependencies(store, row, now)
            store.insert(row)
            if row.idempotency_key is not None:
                store.keys[row.idempotency_key] = IdempotencyKey(
                    row.idempotency_key, row.id, row.task, row.queue, now + ttl_of[row.id]
                )
            if row.state is JobState.WAITING:
                woken.add(row.queue)
            elif row.state is JobState.DELAYED:
                timer = True
    store.notify(woken, timer=timer)
    out: list[Job] = []
    for item in plan:
        if isinstance(item, _Debounce):
            out.append(to_job(item.row, duplicate=True))
        elif isinstance(item, IdempotencyKey):
            out.append(
                Job(
                    id=item.job_id,
                    task=item.task,
                    queue=item.queue,
                    state=item.state or JobState.COMPLETED,
                    idempotency_key=item.name,
                    duplicate=True,
                )
            )
        else:
            out.append(to_job(item[0], duplicate=not item[1]))
    return out


def _postpone(store: Store, debounce: _Debounce, now: float) -> None:
    """Give the key's unstarted job the new payload and metadata, due again after
    the debounce; its key lives on from now."""
    row, new = debounce.row, debounce.new
    row.payload = bytes(new.payload)
    row.metadata = bytes(new.metadata) if new.metadata is not None else None
    row.run_at = now + (new.debounce or 0.0)
    row.expires_at = deadline(row.run_at, row.ttl)
    store.move(row, JobState.DELAYED)
    key = store.keys.get(row.idempotency_key or "")
    if key is not None and key.job_id == row.id:
        key.expires_at = max(key.expires_at, now + new.idempotency_ttl)


def _wait_for_dependencies(store: Store, row: Row, now: float) -> None:
    """Before ``row`` is inserted: register it with its unfinished dependencies
    and decide its state (blocked, or as usual, or cancelled at once)."""
    row.state = JobState.BLOCKED
    verdict = store.dependency_verdict(row)
    if verdict is JobState.CANCELLED:
        row.state = JobState.CANCELLED
        row.failure_reason = FailureReason.DEPENDENCY_FAILED
        row.finished_at = now
        return
    if verdict is JobState.WAITING:
        row.state = JobState.DELAYED if row.run_at > now else JobState.WAITING
        return
    for dep_id in row.depends_on:
        dep = store.jobs[dep_id]
        if dep.state not in TERMINAL_STATES:
            if dep.dependents is None:
                dep.dependents = []
            dep.dependents.append(row.id)

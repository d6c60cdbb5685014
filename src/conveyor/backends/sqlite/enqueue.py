"""enqueue_jobs as one synchronous transaction: idempotency keys, queue
limits (backpressure), dependencies (see dependencies.py) and the batched
inserts.

Like every area module here (claim.py, settle.py, reads.py, admin.py, ...),
each public function is the whole body of ONE transaction and runs in the
writer connection's thread (see connection.py); ``now`` is read inside it, on
the host clock, which is the backend's clock for an embedded database (G11).
Functions may run more than once (a busy database is retried from the start),
so they keep no state outside the connection.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from conveyor.backends.base import NewJob
from conveyor.backends.rows import decode_fields
from conveyor.backends.sqlite.decode import job_from_row
from conveyor.backends.sqlite.dependencies import DependencyPlan, in_workflow
from conveyor.backends.sqlite.queries import INLINE_MAX, Q, json_param
from conveyor.errors import QueueFull
from conveyor.job import DependencyPolicy, FailureReason, Job, JobState
from conveyor.serialization import loads

_STATES = {s.value: s for s in JobState}
_NO_CONFIG: tuple[int | None, float | None] = (None, None)
_CANCEL = DependencyPolicy.CANCEL


def enqueue(conn: sqlite3.Connection, jobs: Sequence[NewJob]) -> list[Job]:
    """Insert ``jobs`` (one transaction); duplicates by idempotency key insert nothing."""
    now = time.time()
    names = list(dict.fromkeys(j.queue for j in jobs))
    configs: dict[str, tuple[int | None, float | None]] = {}
    fair: set[str] = set()  # the fair queues: their jobs go in with fair = 1
    for name, max_size, ttl, is_fair in conn.execute(Q.queue_configs, {"names": json_param(names)}):
        configs[name] = (max_size, ttl)
        if is_fair:
            fair.add(name)
    known: dict[str, Job] = {}
    if any(j.idempotency_key is not None for j in jobs):
        known = _live_keys(conn, jobs, now)
    # Only a batch with dependencies or workflow jobs pays for them (the test
    # is in_workflow's, inline: no call per job).
    plan: DependencyPlan | None = None
    if any(
        j.depends_on or j.workflow_id is not None or j.on_dependency_failure != _CANCEL
        for j in jobs
    ):
        plan = DependencyPlan(conn, jobs)

    results: list[Job] = []
    runs: dict[tuple[Any, ...], list[NewJob]] = {}  # plain jobs, by what they share
    rows: list[tuple[Any, ...]] = []  # insert_job
    fair_rows: list[tuple[Any, ...]] = []  # insert_fair_job: jobs of fair queues
    flow_rows: list[tuple[Any, ...]] = []  # insert_workflow_job
    key_rows: list[tuple[Any, ...]] = []
    postponed: list[tuple[Any, ...]] = []  # postpone_job, run after the inserts
    renewed: list[tuple[Any, ...]] = []  # renew_key, after the key upserts
    added: dict[str, int] = {}
    waiting, delayed = JobState.WAITING, JobState.DELAYED
    for nj in jobs:
        key = nj.idempotency_key
        debounce = nj.debounce
        if key is not None:
            existing = known.get(key)
            if existing is not None:
                if not debounce:
                    results.append(replace(existing, duplicate=True))
                    continue
                if existing.state is waiting or existing.state is delayed:
                    job = _postpone(existing, nj, now + debounce)
                    postponed.append(
                        (
                            bytearray(nj.payload),
                            None if nj.metadata is None else bytearray(nj.metadata),
                            job.run_at,
                            job.id,
                        )
                    )
                    renewed.append((now + nj.idempotency_ttl, key, job.id))
                    known[key] = job  # a later entry of the batch finds it postponed
                    results.append(job)
                    continue
                # Started or finished: the debounced enqueue stores a new job.
        queue = nj.queue
        if debounce:
            run_at = now + debounce
        else:
            run_at = nj.run_at if nj.run_at is not None else now + nj.delay
        state = delayed if run_at > now else waiting
        ttl = nj.ttl  # the effective TTL, stored: every later wait gets it afresh
        config = configs.get(queue)
        if config is not None:
            queue_ttl = config[1]
            if queue_ttl is not None and (ttl is None or queue_ttl < ttl):
                ttl = queue_ttl
        expires_at = None if ttl is None else run_at + ttl
        if plan is not None:
            state = plan.start_state(nj, state)  # may be blocked or cancelled
        if (
            nj.concurrency_key is not None
            or nj.rate_limit_key is not None
            or (plan is not None and in_workflow(nj))
        ):
            row = _workflow_row(nj, state, ttl, run_at, now, expires_at, queue in fair)
            flow_rows.append(row)
        elif (
            ttl is None
            and key is None
            and nj.timeout is None
            and nj.tenant is None
            and nj.retry_of is None
            and nj.metadata is None
            and not (fair and queue in fair)
        ):
            shared = (nj.task, queue, state.value, nj.priority, nj.max_attempts, run_at)
            run = runs.get(shared)
            if run is None:
                runs[shared] = run = []
            run.append(nj)
        else:
            (fair_rows if fair and queue in fair else rows).append(
                (
                    nj.id,
                    nj.task,
                    queue,
                    state.value,
                    nj.priority,
                    nj.max_attempts,
                    nj.timeout,
                    ttl,
                    run_at,
                    now,
                    expires_at,
                    key,
                    nj.tenant,
                    nj.retry_of,
                    bytearray(nj.payload),  # see _insert_plain
                    None if nj.metadata is None else bytearray(nj.metadata),
                )
            )
        problem: str | None = None
        metadata: dict[str, Any] = {}
        if nj.metadata is None:
            try:
                payload = loads(nj.payload)
            except ValueError:
                payload, metadata, problem = _decode_new(nj)
        else:
            payload, metadata, problem = _decode_new(nj)
        # Positional, in decode.JOB_FIELDS order (checked at import).
        job = Job(
            nj.id,
            nj.task,
            queue,
            payload,
            state,
            nj.priority,
            0,  # attempts
            nj.max_attempts,
            nj.timeout,
            run_at,
            now,  # created_at
            None,  # started_at
            None,  # finished_at
            expires_at,
            ttl,
            None,  # lease_until
            None,  # lease_token
            None,  # worker_id
            0,  # stalls
            None,  # progress
            None,  # result
            None,  # error
            [],  # errors
            None,  # failure_reason
            key,
            nj.tenant,
            metadata,
            None,  # retried_as
            nj.retry_of,
            False,  # cancel_requested
            False,  # duplicate
            problem,  # decode_error
        )
        if plan is not None:
            _add_workflow_fields(job, nj, now)
        if nj.concurrency_key is not None:
            job.concurrency_key = nj.concurrency_key
        if nj.rate_limit_key is not None:
            job.rate_limit_key = nj.rate_limit_key
        if key is not None:
            known[key] = job  # a second job with this key in the batch is its duplicate
            key_rows.append((key, nj.id, nj.task, queue, now + nj.idempotency_ttl))
        added[queue] = added.get(queue, 0) + 1
        results.append(job)

    for queue, count in added.items():
        max_size = configs.get(queue, _NO_CONFIG)[0]
        if max_size is not None:
            (pending,) = conn.execute(Q.count_pending, {"queue": queue}).fetchone()
            if pending + count > max_size:
                raise QueueFull(queue, max_size)  # rolls the whole batch back
    if runs:
        _insert_plain(conn, runs, now)
    if rows:
        conn.executemany(Q.insert_job, rows)
    if fair_rows:
        conn.executemany(Q.insert_fair_job, fair_rows)
    if flow_rows:
        conn.executemany(Q.insert_workflow_job, flow_rows)
    if plan is not None:
        plan.write(conn)
    if key_rows:
        conn.executemany(Q.upsert_key, key_rows)
    if postponed:  # in order: the last debounced payload of a key wins
        conn.executemany(Q.postpone_job, postponed)
        conn.executemany(Q.renew_key, renewed)
    return results


def _postpone(existing: Job, nj: NewJob, run_at: float) -> Job:
    """What a debounced enqueue makes of its key's unstarted job: the new
    payload and metadata, delayed until ``run_at``, its wait's TTL from then."""
    payload, metadata, problem = _decode_new(nj)
    return replace(
        existing,
        payload=payload,
        metadata=metadata,
        decode_error=problem,
        state=JobState.DELAYED,
        run_at=run_at,
        expires_at=None if existing.ttl is None else run_at + existing.ttl,
        duplicate=True,
    )


#: Plain jobs sharing everything but id and payload go in one statement when
#: there are at least this many of them.
RUN_MIN = 8


def _insert_plain(
    conn: sqlite3.Connection, runs: dict[tuple[Any, ...], list[NewJob]], now: float
) -> None:
    """Insert plain jobs (no options set), grouped by what they share.

    Binding parameters costs Python's sqlite3 more than SQLite's insert: an exact
    int, float, str or bytearray is cheap, but every None and bytes goes through
    an adapter lookup. So a run of jobs sharing task, queue, state, priority,
    max_attempts and run_at is inserted by ONE statement that reads only the id
    and payload of each job, as the keys and values of one JSON object
    (``insert_job_run``): no Python container per job, which matters less for
    its own cost than for the cyclic garbage collector's, whose passes grow
    with the objects a 5,000-job batch keeps alive. The rest,
    and payloads that cannot travel as JSON text (big, not UTF-8, or with a NUL
    byte), go through ``executemany`` with 9 parameters, the payload bound as a
    bytearray (a BLOB, like bytes, without the adapter lookup).
    """
    single: list[tuple[Any, ...]] = []
    for (task, queue, state, priority, max_attempts, run_at), members in runs.items():
        items: dict[str, str] = {}  # id -> payload text
        for nj in members:
            payload = nj.payload
            if (
                len(members) >= RUN_MIN
                and len(payload) <= INLINE_MAX
                and b"\0" not in payload
                and nj.id not in items  # a repeated id fails its insert below, as it should
            ):
                try:
                    items[nj.id] = payload.decode()
                    continue
                except UnicodeDecodeError:
                    pass
            single.append(
                (nj.id, task, queue, state, priority, max_attempts, run_at, now, bytearray(payload))
            )
        if items:
            params = {
                "task": task,
                "queue": queue,
                "state": state,
                "priority": priority,
                "max_attempts": max_attempts,
                "run_at": run_at,
                "now": now,
                "items": json_param(items),
            }
            conn.execute(Q.insert_job_run, params)
    if single:
        conn.executemany(Q.insert_plain_job, single)


def _workflow_row(
    nj: NewJob,
    state: JobState,
    ttl: float | None,
    run_at: float,
    now: float,
    expires_at: float | None,
    fair: bool,
) -> tuple[Any, ...]:
    """The 24 parameters of ``insert_workflow_job`` for a job with dependencies,
    a workflow, a concurrency key or a rate limit key (a job cancelled at once
    carries its reason and end; ``fair``: its queue is fair)."""
    cancelled = state is JobState.CANCELLED
    return (
        nj.id,
        nj.task,
        nj.queue,
        state.value,
        nj.priority,
        nj.max_attempts,
        nj.timeout,
        ttl,
        run_at,
        now,
        expires_at,
        nj.idempotency_key,
        nj.tenant,
        nj.retry_of,
        bytearray(nj.payload),
        None if nj.metadata is None else bytearray(nj.metadata),
        json_param(list(nj.depends_on)) if nj.depends_on else None,
        nj.on_dependency_failure.value,
        nj.workflow_id,
        FailureReason.DEPENDENCY_FAILED.value if cancelled else None,
        now if cancelled else None,
        nj.concurrency_key,
        nj.rate_limit_key,
        1 if fair else None,
    )


def _add_workflow_fields(job: Job, nj: NewJob, now: float) -> None:
    """The fields the positional ``Job(...)`` above leaves at their defaults."""
    job.depends_on = tuple(nj.depends_on)
    job.on_dependency_failure = nj.on_dependency_failure
    job.workflow_id = nj.workflow_id
    if job.state is JobState.CANCELLED:
        job.failure_reason = FailureReason.DEPENDENCY_FAILED
        job.finished_at = now


def _decode_new(nj: NewJob) -> tuple[Any, dict[str, Any], str | None]:
    """The payload and metadata of a new job as values, through the shared
    decoder, which names any problem (the loop above decodes the plain
    payload-only case itself)."""
    fields = decode_fields(nj.payload, nj.metadata)
    return fields.payload, fields.metadata, fields.problem


def _live_keys(conn: sqlite3.Connection, jobs: Sequence[NewJob], now: float) -> dict[str, Job]:
    """key -> the job a live idempotency key points at (rebuilt from the key row
    with its final state when retention already deleted the job)."""
    keys = list(dict.fromkeys(j.idempotency_key for j in jobs if j.idempotency_key is not None))
    live = conn.execute(Q.live_keys, {"keys": json_param(keys), "now": now}).fetchall()
    if not live:
        return {}
    ids = [row[1] for row in live]
    by_id = {
        row[0]: job_from_row(row)
        for row in conn.execute(Q.jobs_by_ids, {"ids": json_param(ids)}).fetchall()
    }
    found: dict[str, Job] = {}
    for key, job_id, task, queue, final_state in live:
        job = by_id.get(job_id)
        if job is None:
            state = _STATES.get(final_state) if final_state is not None else None
            if state is None:
                continue  # the row vanished without a trace: the key no longer holds
            job = Job(id=job_id, task=task, queue=queue, state=state, idempotency_key=key)
        found[key] = job
    return found

"""enqueue_jobs: one call of the schema's ``enqueue`` function per batch (or
of ``enqueue_plain``, for a batch of plain jobs alike but for id and payload).

:func:`arguments` turns a batch into the function's 22 array parameters (an
option no job of the batch uses is sent as one NULL, not a list of them;
dependencies travel as three arrays with one element per (job, dependency));
:func:`jobs_from_result` builds the returned :class:`Job` values from the
server's clock and the queues' TTLs the call reported, exactly as the
function computed them (same float arithmetic), so no row is read back.

The same two halves serve the pool and a caller's own connection
(transactional enqueue, see transactional.py); :func:`run_on_asyncpg` runs
them on an asyncpg connection, the pool's or the caller's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from conveyor.backends.base import NewJob
from conveyor.backends.postgres.connection import DRIVER_ERRORS, Conn, Pool, raise_typed
from conveyor.backends.postgres.decode import STATES, job_from_row
from conveyor.backends.postgres.queries import Queries
from conveyor.backends.rows import decode_fields
from conveyor.job import DependencyPolicy, FailureReason, Job, JobState
from conveyor.serialization import loads

CANCEL = DependencyPolicy.CANCEL


@dataclass(slots=True)
class Batch:
    """A batch split into the jobs to send and the in-batch duplicates."""

    jobs: list[NewJob]
    sent: list[NewJob]
    same_key_as: dict[int, int]
    """Index in ``jobs`` -> index of the first job with that key."""

    def arguments(self) -> list[Any]:
        sent = self.sent

        def column(values: list[Any]) -> list[Any] | None:
            return values if any(v is not None for v in values) else None

        keyed = any(j.idempotency_key is not None for j in sent)
        return [
            [j.id for j in sent],
            [j.task for j in sent],
            [j.queue for j in sent],
            [j.payload for j in sent],
            [j.priority for j in sent],
            [j.max_attempts for j in sent],
            column([j.timeout for j in sent]),
            [j.delay for j in sent],
            column([j.run_at for j in sent]),
            column([j.ttl for j in sent]),
            [j.idempotency_key for j in sent] if keyed else None,
            [j.idempotency_ttl for j in sent] if keyed else None,
            column([j.tenant for j in sent]),
            column([j.metadata for j in sent]),
            column([j.retry_of for j in sent]),
            *dependency_arguments(sent),
            column([j.concurrency_key for j in sent]),
            column([j.debounce or None for j in sent]),
            *([[j.rate_limit_key for j in sent]] if self.rate_keyed else []),
        ]

    @property
    def rate_keyed(self) -> bool:
        """A job of the batch has a rate_limit_key (``enqueue_rate_keyed`` stores it)."""
        return any(j.rate_limit_key is not None for j in self.sent)

    def statement(self, q: Queries) -> str:
        """The enqueue statement for :meth:`arguments`."""
        return q.enqueue_rate_keyed if self.rate_keyed else q.enqueue


#: The dependency parameters of a batch whose jobs use none of those options.
NO_DEPENDENCIES: tuple[None, None, None, None, None] = (None, None, None, None, None)


def dependency_arguments(sent: Sequence[NewJob]) -> tuple[Any, ...]:
    """p_policies, p_workflows and the (job, dependency) arrays p_dep_of,
    p_dep_ids, p_dep_pos: positions are 1-based in ``sent``; a dependency's
    position is set only when it is an earlier job of the batch."""
    if not any(
        j.depends_on or j.workflow_id is not None or j.on_dependency_failure is not CANCEL
        for j in sent
    ):
        return NO_DEPENDENCIES
    dep_of: list[int] = []
    dep_ids: list[str] = []
    dep_pos: list[int | None] = []
    position: dict[str, int] = {}
    for ordinal, job in enumerate(sent, start=1):
        for dep_id in job.depends_on:
            dep_of.append(ordinal)
            dep_ids.append(dep_id)
            dep_pos.append(position.get(dep_id))
        position[job.id] = ordinal
    policies = [
        None if j.on_dependency_failure == CANCEL else str(j.on_dependency_failure) for j in sent
    ]
    workflows = [j.workflow_id for j in sent]
    return (
        policies if any(p is not None for p in policies) else None,
        workflows if any(w is not None for w in workflows) else None,
        *((dep_of, dep_ids, dep_pos) if dep_ids else (None, None, None)),
    )


def plain_arguments(jobs: Sequence[NewJob]) -> list[Any] | None:
    """The ``enqueue_plain`` parameters when every job shares task, queue,
    priority, max_attempts and delay and uses no other option; else ``None``."""
    first = jobs[0]
    task, queue, priority, max_attempts, delay = (
        first.task, first.queue, first.priority, first.max_attempts, first.delay,
    )  # fmt: skip
    for j in jobs:
        if (
            j.task != task
            or j.queue != queue
            or j.priority != priority
            or j.max_attempts != max_attempts
            or j.delay != delay
            or j.run_at is not None
            or j.ttl is not None
            or j.idempotency_key is not None
            or j.timeout is not None
            or j.tenant is not None
            or j.metadata is not None
            or j.retry_of is not None
            or j.depends_on
            or j.workflow_id is not None
            or j.on_dependency_failure is not CANCEL
            or j.concurrency_key is not None
            or j.rate_limit_key is not None
            or j.debounce
        ):
            return None
    return [
        [j.id for j in jobs],
        [j.payload for j in jobs],
        task,
        queue,
        priority,
        max_attempts,
        float(delay),
    ]


def build_plain_jobs(jobs: Sequence[NewJob], now: float, ttl: float | None) -> list[Job]:
    """The Jobs ``enqueue_plain`` stored: one clock, one queue TTL for all."""
    first = jobs[0]
    run_at = now + first.delay
    state = JobState.DELAYED if run_at > now else JobState.WAITING
    expires_at = None if ttl is None else run_at + ttl
    task, queue, priority, max_attempts = (
        first.task,
        first.queue,
        first.priority,
        first.max_attempts,
    )
    created: list[Job] = []
    for nj in jobs:
        try:
            payload = loads(nj.payload)
            problem = None
        except ValueError:
            fields = decode_fields(nj.payload)
            payload, problem = fields.payload, fields.problem
        # Positional, in decode.JOB_FIELDS order (checked at import).
        job = Job(
            nj.id, task, queue, payload, state, priority, 0, max_attempts, None, run_at,
            now, None, None, expires_at, ttl, None, None, None, 0, None, None, None, [],
            None, None, None, {}, None, None, False, False, problem,
        )  # fmt: skip
        created.append(job)
    return created


def split(jobs: Sequence[NewJob]) -> Batch:
    """A second job with a key already in the batch is the first one's duplicate;
    a debounced one gives the first its payload and metadata (and its debounce),
    in batch order, so the job the key ends with carries the last of them."""
    first: dict[str, int] = {}
    sent_at: dict[str, int] = {}
    same: dict[int, int] = {}
    sent: list[NewJob] = []
    for index, job in enumerate(jobs):
        key = job.idempotency_key
        if key is not None:
            if key in first:
                same[index] = first[key]
                if job.debounce:
                    at = sent_at[key]
                    sent[at] = replace(
                        sent[at], payload=job.payload, metadata=job.metadata, debounce=job.debounce
                    )
                continue
            first[key] = index
            sent_at[key] = len(sent)
        sent.append(job)
    return Batch(list(jobs), sent, same)


@dataclass(slots=True)
class Reply:
    """What the enqueue function reported."""

    now: float
    ttls: dict[str, float]
    duplicates: dict[int, tuple[str, str, str, str | None]]
    """0-based index in ``Batch.sent`` -> (job id, task, queue, final state) of the key."""
    states: dict[int, str]
    """0-based index in ``Batch.sent`` -> the state its dependencies gave it
    (blocked, cancelled), for the jobs not stored as usual."""


def read_reply(rows: Sequence[Any]) -> Reply:  # asyncpg Records or psycopg tuples
    now = 0.0
    ttls: dict[str, float] = {}
    duplicates: dict[int, tuple[str, str, str, str | None]] = {}
    states: dict[int, str] = {}
    for kind, ordinal, job_id, task, queue, state, value in rows:
        if kind == "now":
            now = value
        elif kind == "ttl":
            ttls[queue] = value
        elif kind == "dup":
            duplicates[ordinal - 1] = (job_id, task, queue, state)
        elif kind == "state":
            states[ordinal - 1] = state
    return Reply(now, ttls, duplicates, states)


def build_jobs(batch: Batch, reply: Reply, existing: dict[str, Job]) -> list[Job]:
    """One Job per input job, in order; ``existing`` maps the duplicates' job ids
    to their stored jobs (missing: rebuilt from the key's remembered state)."""
    now = reply.now
    ttls = reply.ttls
    by_sent: list[Job] = []
    for index, nj in enumerate(batch.sent):
        dup = reply.duplicates.get(index)
        if dup is not None:
            job_id, task, queue, final_state = dup
            found = existing.get(job_id)
            if found is None:
                state = STATES.get(final_state or "", JobState.COMPLETED)
                found = Job(
                    id=job_id, task=task, queue=queue, state=state,
                    idempotency_key=nj.idempotency_key,
                )  # fmt: skip
            by_sent.append(replace(found, duplicate=True))
            continue
        job = _new_job(nj, now, ttls.get(nj.queue))
        if reply.states:
            _apply_dependency_state(job, reply.states.get(index), now)
        by_sent.append(job)
    results: list[Job] = []
    sent_iter = iter(by_sent)
    for index in range(len(batch.jobs)):
        original = batch.same_key_as.get(index)
        if original is None:
            results.append(next(sent_iter))
        else:
            results.append(replace(results[original], duplicate=True))
    return results


def _new_job(nj: NewJob, now: float, queue_ttl: float | None) -> Job:
    if nj.debounce:
        run_at = now + nj.debounce
    else:
        run_at = nj.run_at if nj.run_at is not None else now + nj.delay
    state = JobState.DELAYED if run_at > now else JobState.WAITING
    ttl = nj.ttl
    if queue_ttl is not None and (ttl is None or queue_ttl < ttl):
        ttl = queue_ttl
    problem: str | None = None
    metadata: dict[str, Any] = {}
    try:
        if nj.metadata is not None:
            raise ValueError("metadata to decode")
        payload = loads(nj.payload)
    except ValueError:
        fields = decode_fields(nj.payload, nj.metadata)
        payload, metadata, problem = fields.payload, fields.metadata, fields.problem
    # Positional, in decode.JOB_FIELDS order (checked at import).
    return Job(
        nj.id, nj.task, nj.queue, payload, state, nj.priority, 0, nj.max_attempts,
        nj.timeout, run_at, now, None, None, None if ttl is None else run_at + ttl, ttl,
        None, None, None, 0, None, None, None, [], None, nj.idempotency_key, nj.tenant,
        metadata, None, nj.retry_of, False, False, problem, tuple(nj.depends_on),
        nj.on_dependency_failure, nj.workflow_id, nj.concurrency_key, nj.rate_limit_key,
    )  # fmt: skip


def _apply_dependency_state(job: Job, state: str | None, now: float) -> None:
    """The state the enqueue function gave a job with dependencies."""
    if state == JobState.BLOCKED.value:
        job.state = JobState.BLOCKED
    elif state == JobState.CANCELLED.value:
        job.state = JobState.CANCELLED
        job.failure_reason = FailureReason.DEPENDENCY_FAILED
        job.finished_at = now


async def enqueue_jobs(pool: Pool, q: Queries, jobs: Sequence[NewJob]) -> list[Job]:
    """``jobs`` on a pooled connection (committed when the call returns)."""
    async with pool.acquire("enqueue") as conn:
        return await run_on_asyncpg(conn, q, jobs)


async def run_on_asyncpg(connection: Conn, q: Queries, jobs: Sequence[NewJob]) -> list[Job]:
    """One ``enqueue_plain`` call when the batch allows it, else one ``enqueue``
    call (plus one read of the stored duplicates, when keys matched any)."""
    plain = plain_arguments(jobs)
    if plain is not None:
        try:
            rows = await connection.fetch(q.enqueue_plain, *plain)
        except DRIVER_ERRORS as exc:
            raise_typed(exc, "enqueue")
        return build_plain_jobs(jobs, rows[0][0], rows[0][1])
    batch = split(jobs)
    try:
        reply = read_reply(await connection.fetch(batch.statement(q), *batch.arguments()))
        existing: dict[str, Job] = {}
        if reply.duplicates:
            ids = [dup[0] for dup in reply.duplicates.values()]
            rows = await connection.fetch(q.jobs_by_ids, ids)
            existing = {row[0]: job_from_row(row) for row in rows}
    except DRIVER_ERRORS as exc:
        raise_typed(exc, "enqueue")
    return build_jobs(batch, reply, existing)

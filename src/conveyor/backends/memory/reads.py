"""Reads in memory: jobs by id or filter, counts per queue, the queues known."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from conveyor.backends.base import JobFilter, KeyCount, QueueInfo, RateKeyUse, TenantCount
from conveyor.backends.fairness import rank_tenant_counts
from conveyor.backends.memory.store import Row, Store, to_job
from conveyor.backends.records import rank_key_counts, rank_rate_key_uses
from conveyor.job import Job, JobState
from conveyor.ratelimit import RateLimit


def _matches(row: Row, where: JobFilter) -> bool:
    if where.states is not None and row.state not in where.states:
        return False
    if where.queue is not None and row.queue != where.queue:
        return False
    if where.task is not None and row.task != where.task:
        return False
    if where.tenant is not None and row.tenant != where.tenant:
        return False
    if where.failure_reason is not None and row.failure_reason is not where.failure_reason:
        return False
    if where.idempotency_key is not None and row.idempotency_key != where.idempotency_key:
        return False
    if where.workflow_id is not None and row.workflow_id != where.workflow_id:
        return False
    return where.finished_before is None or (
        row.finished_at is not None and row.finished_at < where.finished_before
    )


def select(store: Store, where: JobFilter) -> list[Row]:
    """The rows ``where`` matches, in no particular order."""
    if where.states is not None:
        ids: Iterable[str] = [i for s in dict.fromkeys(where.states) for i in store.by_state[s]]
        rows: Iterable[Row] = (store.jobs[i] for i in ids)
    else:
        rows = store.jobs.values()
    return [row for row in rows if _matches(row, where)]


def get_jobs(store: Store, job_ids: Sequence[str]) -> list[Job]:
    out: list[Job] = []
    for job_id in dict.fromkeys(job_ids):
        row = store.jobs.get(job_id)
        if row is not None:
            out.append(to_job(row))
    return out


def list_jobs(store: Store, where: JobFilter, limit: int, offset: int) -> list[Job]:
    rows = select(store, where)
    rows.sort(key=lambda r: r.id, reverse=True)  # ids increase with creation
    return [to_job(r) for r in rows[max(0, offset) : max(0, offset) + max(0, limit)]]


def count_jobs(store: Store, where: JobFilter) -> int:
    return len(select(store, where))


def _known_queues(store: Store) -> list[str]:
    names = set(store.queues)
    names.update(q for q, counts in store.counts.items() if any(counts.values()))
    return sorted(names)


def queue_counts(store: Store) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for queue in _known_queues(store):
        counts = store.counts.get(queue)
        out[queue] = {s.value: (counts[s] if counts else 0) for s in JobState}
    return out


def oldest_waiting(store: Store) -> dict[str, float]:
    now = store.now()
    out: dict[str, float] = {}
    for job_id in store.by_state[JobState.WAITING]:
        row = store.jobs[job_id]
        if row.run_at <= now and (row.queue not in out or row.run_at < out[row.queue]):
            out[row.queue] = row.run_at
    return out


def list_queues(store: Store) -> list[QueueInfo]:
    out = []
    for name in _known_queues(store):
        info = store.queues.get(name) or QueueInfo(name)
        out.append(replace(info, weights=dict(info.weights)))
    return out


def tenant_counts(store: Store, queue: str, limit: int) -> list[TenantCount]:
    waiting: Counter[str | None] = Counter()
    active: Counter[str | None] = Counter()
    for state, counter in (
        (JobState.WAITING, waiting),
        (JobState.DELAYED, waiting),
        (JobState.ACTIVE, active),
    ):
        for job_id in store.by_state[state]:
            row = store.jobs[job_id]
            if row.queue == queue:
                counter[row.tenant] += 1
    counts = (TenantCount(t, waiting[t], active[t]) for t in waiting.keys() | active.keys())
    return rank_tenant_counts(counts, limit)


def key_counts(store: Store, tasks: Sequence[str], limit: int) -> list[KeyCount]:
    """Active jobs from the active set, waiting ones from the waiting set."""
    asked = set(tasks)
    active: Counter[tuple[str, str | None]] = Counter()
    waiting: Counter[tuple[str, str | None]] = Counter()
    for job_id in store.by_state[JobState.ACTIVE]:
        row = store.jobs[job_id]
        if row.task in asked or row.concurrency_key is not None:
            active[(row.task, row.concurrency_key)] += 1
    for job_id in store.by_state[JobState.WAITING] if asked else ():
        row = store.jobs[job_id]
        if row.task in asked:
            waiting[(row.task, row.concurrency_key)] += 1
    counts = (
        KeyCount(task, key, active[(task, key)], waiting[(task, key)] if task in asked else None)
        for task, key in active.keys() | waiting.keys()
    )
    return rank_key_counts(counts, limit)


def rate_key_usage(store: Store, rates: Mapping[str, RateLimit], limit: int) -> list[RateKeyUse]:
    """Starts per window from the claim's logs, counted without trimming them."""
    now = store.now()
    uses = (
        RateKeyUse(task, key, sum(1 for at in log.starts if at > now - rates[task].period))
        for (task, key), log in store.key_rates.items()
        if task in rates
    )
    return rank_rate_key_uses(uses, limit)

"""What each page shows, read through the ``Conveyor`` app's public API, the
same calls the ``/api/v1`` endpoints make, so the numbers always agree."""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from conveyor.app import Conveyor
from conveyor.backends.base import (
    CircuitInfo,
    CircuitState,
    JobFilter,
    JobStat,
    ScheduleRecord,
    WorkerInfo,
)
from conveyor.dispatch.probe import BrokerDepth, BrokerProbe
from conveyor.durations import parse_duration
from conveyor.filters import job_filter
from conveyor.job import FailureReason, Job, JobState
from conveyor.server.dashboard.charts import Chart, throughput_charts

STATES: tuple[str, ...] = tuple(state.value for state in JobState)
REASONS: tuple[str, ...] = tuple(reason.value for reason in FailureReason)
PAGE_SIZE = 50
#: Next fire times shown per schedule.
NEXT_FIRES = 3


@dataclass(slots=True)
class QueueRow:
    name: str
    paused: bool
    max_size: int | None
    ttl: float | None
    counts: dict[str, int]
    oldest_waiting_s: float | None
    fairness: str | None = None
    weights: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


async def queue_rows(app: Conveyor) -> tuple[float, list[QueueRow]]:
    """Every queue known by its settings or by its jobs, with counts per state."""
    backend = await app.connect()
    now, infos, counts, oldest = await asyncio.gather(
        backend.now(), app.queues(), app.stats(), backend.oldest_waiting()
    )
    by_name = {info.name: info for info in infos}
    rows = []
    for name in sorted(set(by_name) | set(counts)):
        info = by_name.get(name)
        run_at = oldest.get(name)
        rows.append(
            QueueRow(
                name=name,
                paused=info.paused if info else False,
                max_size=info.max_size if info else None,
                ttl=info.ttl if info else None,
                counts={state: counts.get(name, {}).get(state, 0) for state in STATES},
                oldest_waiting_s=max(0.0, now - run_at) if run_at is not None else None,
                fairness=info.fairness if info else None,
                weights=dict(info.weights) if info else {},
            )
        )
    return now, rows


async def broker_depths(
    probe: BrokerProbe, rows: list[QueueRow]
) -> tuple[dict[str, BrokerDepth | None], str | None]:
    """Each queue's broker queue depth, or an error when the broker did not answer."""
    try:
        return await probe.depths(row.name for row in rows), None
    except Exception as exc:
        return {}, f"broker: {exc or type(exc).__name__}"


#: The day's per-minute rows are read at most this often per app (seconds): the
#: day chart's 15-minute bins hardly move between two live refreshes, and the
#: read grows with minutes x tasks x queues. The last hour is read every time.
DAY_SERIES_TTL = 60.0
_day_cache: weakref.WeakKeyDictionary[Conveyor, tuple[float, list[JobStat]]] = (
    weakref.WeakKeyDictionary()
)


async def _day_series(app: Conveyor, now: float) -> list[JobStat]:
    backend = await app.connect()
    hour_start = now - 3600 - 60
    cached = _day_cache.get(app)
    if cached is None or time.monotonic() - cached[0] > DAY_SERIES_TTL:
        cached = (time.monotonic(), await backend.job_stat_series(now - 86400 - 900))
        _day_cache[app] = cached
    older = [stat for stat in cached[1] if stat.minute < hour_start]
    return older + await backend.job_stat_series(hour_start)


@dataclass(slots=True)
class Overview:
    now: float
    queues: list[QueueRow]
    totals: dict[str, int]
    workers_alive: int
    workers_known: int
    dead_letters: int
    circuits_open: int
    oldest_waiting_s: float | None
    charts: list[Chart]


async def overview(app: Conveyor) -> Overview:
    (now, queues), workers, dead, circuits = await asyncio.gather(
        queue_rows(app), app.workers(), app.dlq.count(), app.circuits()
    )
    stats = await _day_series(app, now)
    totals = {state: sum(q.counts[state] for q in queues) for state in STATES}
    ages = [q.oldest_waiting_s for q in queues if q.oldest_waiting_s is not None]
    return Overview(
        now=now,
        queues=queues,
        totals=totals,
        workers_alive=sum(1 for _, alive in workers if alive),
        workers_known=len(workers),
        dead_letters=dead,
        circuits_open=sum(1 for c in circuits if c.state is CircuitState.OPEN),
        oldest_waiting_s=max(ages) if ages else None,
        charts=throughput_charts(stats, now),
    )


@dataclass(slots=True)
class JobQuery:
    state: str | None = None
    queue: str | None = None
    task: str | None = None
    tenant: str | None = None
    reason: str | None = None
    age: str | None = None
    """Dead letters only: finished longer ago than this duration ("1h", "7d")."""
    search: str | None = None
    offset: int = 0

    def filters(self) -> dict[str, str]:
        """The non-empty filters, as query parameters (for links and forms)."""
        values = {
            "state": self.state,
            "queue": self.queue,
            "task": self.task,
            "tenant": self.tenant,
            "reason": self.reason,
            "age": self.age,
            "q": self.search,
        }
        return {k: v for k, v in values.items() if v}


@dataclass(slots=True)
class JobPage:
    now: float
    jobs: list[Job]
    total: int
    offset: int
    limit: int = PAGE_SIZE
    problems: list[str] = field(default_factory=list)

    @property
    def first(self) -> int:
        return self.offset + 1 if self.jobs else 0

    @property
    def last(self) -> int:
        return self.offset + len(self.jobs)

    @property
    def prev_offset(self) -> int | None:
        return max(0, self.offset - self.limit) if self.offset > 0 else None

    @property
    def next_offset(self) -> int | None:
        return self.offset + self.limit if self.offset + self.limit < self.total else None


async def _filter_of(app: Conveyor, q: JobQuery, state: str | None) -> JobFilter:
    finished_before = None
    if q.age:
        backend = await app.connect()
        finished_before = await backend.now() - parse_duration(q.age)
    return job_filter(
        state,
        queue=q.queue,
        task=q.task,
        tenant=q.tenant,
        reason=q.reason,
        finished_before=finished_before,
    )


async def search_jobs(app: Conveyor, text: str) -> list[Job]:
    """The job with this id, and the jobs holding this idempotency key."""
    backend = await app.connect()
    by_id, by_key = await asyncio.gather(
        app.get_job(text), backend.list_jobs(JobFilter(idempotency_key=text), PAGE_SIZE)
    )
    found = [by_id] if by_id is not None else []
    return found + [job for job in by_key if by_id is None or job.id != by_id.id]


async def job_page(app: Conveyor, q: JobQuery, state: str | None) -> JobPage:
    backend = await app.connect()
    now = await backend.now()
    if q.search:
        jobs = await search_jobs(app, q.search)
        return JobPage(now, jobs, len(jobs), 0)
    where = await _filter_of(app, q, state)
    jobs, total = await asyncio.gather(
        backend.list_jobs(where, PAGE_SIZE, q.offset), backend.count_jobs(where)
    )
    return JobPage(now, jobs, total, q.offset)


async def count_matching(app: Conveyor, q: JobQuery, state: str | None) -> int:
    backend = await app.connect()
    return await backend.count_jobs(await _filter_of(app, q, state))


@dataclass(slots=True)
class JobDetail:
    now: float
    job: Job
    payload: str
    result: str | None
    progress: str | None
    metadata: str | None
    retry_of_gone: bool = False
    """The job this one retries was deleted or purged: no link to a 404."""


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


async def job_detail(app: Conveyor, job_id: str) -> JobDetail | None:
    backend = await app.connect()
    now, job = await asyncio.gather(backend.now(), app.get_job(job_id))
    if job is None:
        return None
    gone = job.retry_of is not None and await app.get_job(job.retry_of) is None
    return JobDetail(
        now=now,
        job=job,
        payload=pretty(job.payload),
        result=pretty(job.result) if job.result is not None else None,
        progress=pretty(job.progress) if job.progress is not None else None,
        metadata=pretty(job.metadata) if job.metadata else None,
        retry_of_gone=gone,
    )


@dataclass(slots=True)
class ScheduleRow:
    record: ScheduleRecord
    next_fires: list[datetime]


async def schedule_rows(app: Conveyor) -> list[ScheduleRow]:
    records = await app.schedules.list()
    fires = await asyncio.gather(
        *(app.schedules.next_fires(record.name, NEXT_FIRES) for record in records)
    )
    return [ScheduleRow(r, f) for r, f in zip(records, fires, strict=True)]


@dataclass(slots=True)
class WorkerRow:
    info: WorkerInfo
    alive: bool


async def worker_rows(app: Conveyor) -> tuple[float, list[WorkerRow]]:
    backend = await app.connect()
    now, workers = await asyncio.gather(backend.now(), app.workers())
    rows = [WorkerRow(info, alive) for info, alive in workers]
    rows.sort(key=lambda r: (not r.alive, r.info.host, r.info.started_at, r.info.id))
    return now, rows


async def circuit_rows(app: Conveyor) -> tuple[float, list[CircuitInfo]]:
    backend = await app.connect()
    now, circuits = await asyncio.gather(backend.now(), app.circuits())
    order = {CircuitState.OPEN: 0, CircuitState.HALF_OPEN: 1, CircuitState.CLOSED: 2}
    return now, sorted(circuits, key=lambda c: (order[c.state], c.task))


@dataclass(slots=True)
class DeadLetterPage(JobPage):
    retried_hidden: int = 0
    """Dead letters of this page not shown because they were retried already."""

    @property
    def last(self) -> int:
        return self.offset + len(self.jobs) + self.retried_hidden


async def dead_letter_page(app: Conveyor, q: JobQuery, show_retried: bool) -> DeadLetterPage:
    """Failed jobs matching the filters, newest first, a page at a time. By
    default a dead letter already retried (it has ``retried_as``: its copy runs
    as a new job) is left out of the page: it needs no more action, though it
    stays stored, counted by the API and purgeable until purged."""
    backend = await app.connect()
    now = await backend.now()
    if q.search:
        found = [job for job in await search_jobs(app, q.search) if job.state is JobState.FAILED]
        return DeadLetterPage(now, found, len(found), 0)
    where = await _filter_of(app, q, JobState.FAILED.value)
    jobs, total = await asyncio.gather(
        backend.list_jobs(where, PAGE_SIZE, q.offset), backend.count_jobs(where)
    )
    shown = jobs if show_retried else [job for job in jobs if job.retried_as is None]
    return DeadLetterPage(now, shown, total, q.offset, retried_hidden=len(jobs) - len(shown))

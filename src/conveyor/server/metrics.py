"""``GET /metrics``: Prometheus text, read from the backend at scrape time.

Job counts and durations come from the statistics every worker flushes to the
backend (``worker/stats.py``), so one scrape sees the runs of every worker on
every machine; queue depths, waiting ages, dead letters, workers and circuits
are read live. A scrape reads the backend once into a snapshot, then a
collector on a fresh registry turns it into metric families.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from conveyor.app import Conveyor
from conveyor.backends.base import (
    DURATION_BUCKETS,
    Backend,
    CircuitInfo,
    CircuitState,
    JobStat,
    TenantCount,
)
from conveyor.dispatch.counts import OUTCOMES, Kind
from conveyor.dispatch.probe import BrokerDepth, BrokerProbe, dispatch_counts, dispatch_lag
from conveyor.filters import job_filter
from conveyor.flow import TENANTS_SHOWN
from conveyor.job import JobState
from conveyor.server.auth import Scope
from conveyor.server.routing import route, state_of
from conveyor.server.snapshot import QueueSnapshot, read_snapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: ``conveyor_tenant_jobs`` labels of the jobs without a tenant, and of the
#: tenants past the cap.
NO_TENANT = "(none)"
OTHER_TENANTS = "(other)"
#: Most active jobs read to label ``conveyor_jobs_active`` by task.
ACTIVE_SCAN_LIMIT = 100_000
#: Runs that never started (TTL expiry) have no duration.
_NO_DURATION = frozenset({"expired"})


@dataclass(slots=True)
class DispatchScrape:
    """RabbitMQ dispatch: the store's lag and every process's counts and, when
    the broker answered, its depths."""

    lag: float | None
    counts: dict[tuple[str, str], int] | None
    broker_up: bool
    depths: dict[str, BrokerDepth | None]
    dead_letters: int | None


@dataclass(slots=True)
class Scrape:
    totals: list[JobStat]
    active: dict[tuple[str, str], int]
    queues: QueueSnapshot
    circuits: list[CircuitInfo]
    dispatch: DispatchScrape | None = None
    tenants: dict[str, list[TenantCount]] = field(default_factory=dict)
    """Per fair queue, its busiest tenants (at most ``TENANTS_SHOWN``)."""


async def read_scrape(app: Conveyor, broker: BrokerProbe | None = None) -> Scrape:
    backend = await app.connect()
    totals, active_jobs, snap, circuits, tenants = await asyncio.gather(
        backend.job_stat_totals(),
        backend.list_jobs(job_filter(JobState.ACTIVE), ACTIVE_SCAN_LIMIT),
        read_snapshot(app),
        backend.list_circuits(),
        app.tenant_usage(TENANTS_SHOWN),
    )
    active: dict[tuple[str, str], int] = defaultdict(int)
    for job in active_jobs:
        active[job.task, job.queue] += 1
    scrape = Scrape(totals, dict(active), snap, circuits, tenants=tenants)
    if broker is not None:
        scrape.dispatch = await read_dispatch(backend, broker, sorted(snap.counts))
    return scrape


async def read_dispatch(backend: Backend, broker: BrokerProbe, queues: list[str]) -> DispatchScrape:
    lag = await dispatch_lag(backend)
    counts = await dispatch_counts(backend)
    try:
        depths = await broker.depths(queues)
        dead_letters = await broker.dead_letters()
    except Exception:  # the broker is down: reported as conveyor_broker_up 0
        return DispatchScrape(lag, counts, False, {}, None)
    return DispatchScrape(lag, counts, True, depths, dead_letters)


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


class ScrapeCollector(Collector):
    def __init__(self, scrape: Scrape) -> None:
        self.scrape = scrape

    def collect(self) -> Iterator[Metric]:
        s = self.scrape
        jobs = CounterMetricFamily(
            "conveyor_jobs",
            "Finished runs of jobs, by task, queue and status (all workers).",
            labels=["task", "queue", "status"],
        )
        histograms: dict[tuple[str, str], tuple[list[int], float]] = {}
        for stat in s.totals:
            jobs.add_metric([stat.task, stat.queue, stat.status], stat.count)
            if stat.status in _NO_DURATION:
                continue
            buckets, total = histograms.get((stat.task, stat.queue), ([0] * len(stat.buckets), 0.0))
            merged = [a + b for a, b in zip(buckets, stat.buckets, strict=True)]
            histograms[stat.task, stat.queue] = (merged, total + stat.duration_sum)
        yield jobs

        durations = HistogramMetricFamily(
            "conveyor_job_duration_seconds",
            "How long runs took, by task and queue (all workers).",
            labels=["task", "queue"],
        )
        for (task, queue), (buckets, total) in sorted(histograms.items()):
            cumulative, running = [], 0
            for bound, n in zip(DURATION_BUCKETS, buckets, strict=True):
                running += n
                cumulative.append((_le(bound), float(running)))
            durations.add_metric([task, queue], cumulative, total)
        yield durations

        active = GaugeMetricFamily(
            "conveyor_jobs_active", "Jobs running now, by task and queue.", labels=["task", "queue"]
        )
        for (task, queue), n in sorted(s.active.items()):
            active.add_metric([task, queue], n)
        yield active

        depth = GaugeMetricFamily(
            "conveyor_queue_depth", "Jobs per queue and state.", labels=["queue", "state"]
        )
        dead = GaugeMetricFamily(
            "conveyor_dead_letters", "Failed jobs kept in the dead-letter queue.", labels=["queue"]
        )
        wait = GaugeMetricFamily(
            "conveyor_queue_wait_seconds",
            "Age of the oldest due waiting job per queue (0 when none waits).",
            labels=["queue"],
        )
        for queue, states in sorted(s.queues.counts.items()):
            for state, n in sorted(states.items()):
                depth.add_metric([queue, state], n)
            dead.add_metric([queue], states.get("failed", 0))
            wait.add_metric([queue], s.queues.oldest_waiting_s.get(queue, 0.0))
        yield depth
        yield wait
        yield dead

        yield GaugeMetricFamily(
            "conveyor_workers_alive",
            "Workers whose heartbeat is recent.",
            value=s.queues.alive_workers,
        )
        circuit = GaugeMetricFamily(
            "conveyor_circuit_open",
            "1 while a task's circuit is open (its jobs are held back), else 0.",
            labels=["task"],
        )
        for info in s.circuits:
            circuit.add_metric([info.task], 1.0 if info.state is CircuitState.OPEN else 0.0)
        yield circuit
        yield tenant_metrics(s.tenants, s.queues.counts)
        if s.dispatch is not None:
            yield from dispatch_metrics(s.dispatch)


def tenant_metrics(
    tenants: dict[str, list[TenantCount]], counts: dict[str, dict[str, int]]
) -> Metric:
    """``conveyor_tenant_jobs{queue,tenant,state}`` of the fair queues: the
    busiest tenants by name (``(none)`` for jobs without a tenant), the rest
    summed as ``(other)`` so a queue has at most ``TENANTS_SHOWN + 1`` series
    per state."""
    family = GaugeMetricFamily(
        "conveyor_tenant_jobs",
        f"Jobs of a fair queue per tenant and state (waiting includes delayed); the "
        f"{TENANTS_SHOWN} tenants with most waiting, the rest as tenant '{OTHER_TENANTS}'.",
        labels=["queue", "tenant", "state"],
    )
    for queue, rows in sorted(tenants.items()):
        states = counts.get(queue, {})
        waiting = states.get("waiting", 0) + states.get("delayed", 0)
        active = states.get("active", 0)
        for row in rows:
            tenant = NO_TENANT if row.tenant is None else row.tenant
            family.add_metric([queue, tenant, "waiting"], row.waiting)
            family.add_metric([queue, tenant, "active"], row.active)
            waiting -= row.waiting
            active -= row.active
        if len(rows) >= TENANTS_SHOWN:  # the tenants past the cap, summed
            family.add_metric([queue, OTHER_TENANTS, "waiting"], max(0, waiting))
            family.add_metric([queue, OTHER_TENANTS, "active"], max(0, active))
    return family


def dispatch_metrics(d: DispatchScrape) -> Iterator[Metric]:
    if d.lag is not None:
        yield GaugeMetricFamily(
            "conveyor_dispatch_lag_seconds",
            "How long the oldest due job has waited for its broker message (0: none).",
            value=d.lag,
        )
    if d.counts is not None:
        yield from dispatch_count_metrics(d.counts)
    yield GaugeMetricFamily(
        "conveyor_broker_up", "1 when the RabbitMQ broker answered this scrape.", value=d.broker_up
    )
    messages = GaugeMetricFamily(
        "conveyor_broker_queue_messages",
        "Ready messages in each queue's broker queue (unacknowledged ones not counted).",
        labels=["queue"],
    )
    consumers = GaugeMetricFamily(
        "conveyor_broker_queue_consumers",
        "Consumers on each queue's broker queue.",
        labels=["queue"],
    )
    for queue, depth in sorted(d.depths.items()):
        if depth is not None:
            messages.add_metric([queue], depth.messages)
            consumers.add_metric([queue], depth.consumers)
    yield messages
    yield consumers
    if d.dead_letters is not None:
        yield GaugeMetricFamily(
            "conveyor_broker_dead_letters",
            "Messages the broker dead-lettered and its dead-letter queue still keeps.",
            value=d.dead_letters,
        )


#: The counter families of dispatch/counts.py's kinds (``<name>_total{outcome}``).
COUNT_FAMILIES: dict[Kind, tuple[str, str]] = {
    "message": (
        "conveyor_dispatch_messages",
        "Dispatch messages by outcome (published, confirmed, returned, unconfirmed, "
        "reconciled, delivered, redelivered), all processes.",
    ),
    "dead_letter": (
        "conveyor_dispatch_dead_letters",
        "Broker dead letters handled, by outcome (expired, ignored, dropped, requeued), "
        "all processes.",
    ),
}


def dispatch_count_metrics(counts: dict[tuple[str, str], int]) -> Iterator[Metric]:
    for kind, (name, documentation) in COUNT_FAMILIES.items():
        family = CounterMetricFamily(name, documentation, labels=["outcome"])
        for outcome in OUTCOMES[kind]:  # every outcome, 0 before its first count
            family.add_metric([outcome], counts.get((kind, outcome), 0))
        yield family


def render(scrape: Scrape) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ScrapeCollector(scrape))
    return generate_latest(registry)


async def metrics(request: Request) -> Response:
    state = state_of(request)
    scrape = await read_scrape(state.app, state.broker)
    return Response(render(scrape), media_type=CONTENT_TYPE)


ROUTES = [route("/metrics", metrics, "GET", Scope.READ)]

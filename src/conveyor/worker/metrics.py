"""Prometheus metrics of one worker process (``conveyor worker --metrics-port``).

Built from the app's events (``active``, ``completed``, ``failed``,
``cancelled``; ``claimed``, ``settled`` and ``leases_renewed`` for the store's
round trips; ``dispatch`` with RabbitMQ dispatch) plus an event-loop lag probe,
so the worker itself carries no metrics code: without ``--metrics-port`` nobody
listens, and the worker only checks that once per round trip. With
``--processes N`` the supervisor serves one port for all children through
prometheus_client's multiprocess mode: it points ``PROMETHEUS_MULTIPROC_DIR`` at
a fresh temporary directory before starting them, each child writes its values
there, and the supervisor's collector sums them on every scrape (gauges count
live children only).

The store-wide view (queue depths, ages, totals of every worker) stays on
``conveyor serve``'s ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from conveyor.errors import MissingDependency

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from conveyor.events import EventBus
    from conveyor.job import Job

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
#: Store round trips: from a local SQLite file (sub-millisecond) to a remote server.
ROUND_TRIP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


def client() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise MissingDependency(
            "--metrics-port needs prometheus-client: pip install 'conveyor[server]'"
        ) from None
    return prometheus_client


class WorkerMetrics:
    """The metrics of the worker(s) in this process, fed by the app's events."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        prom = client()
        self.registry = registry if registry is not None else prom.CollectorRegistry()
        into = {"registry": self.registry}
        self.jobs = prom.Counter(
            "conveyor_worker_jobs",
            "Attempts this worker ended, by task and outcome "
            "(completed, retried, failed, cancelled).",
            ["task", "outcome"],
            **into,
        )
        self.duration = prom.Histogram(
            "conveyor_worker_job_duration_seconds",
            "Handler run time of the attempts this worker ended, by task and outcome.",
            ["task", "outcome"],
            buckets=DURATION_BUCKETS,
            **into,
        )
        self.running = prom.Gauge(
            "conveyor_worker_jobs_running",
            "Attempts running now.",
            multiprocess_mode="livesum",
            **into,
        )
        self.loop_lag = prom.Gauge(
            "conveyor_worker_event_loop_lag_seconds",
            "How late the event loop woke a timer, last probe (the most of any process).",
            multiprocess_mode="livemax",
            **into,
        )
        self.claim_latency = prom.Histogram(
            "conveyor_worker_claim_seconds",
            "Round-trip time of this worker's claims (one per batch of jobs asked for).",
            buckets=ROUND_TRIP_BUCKETS,
            **into,
        )
        self.settle_latency = prom.Histogram(
            "conveyor_worker_settle_seconds",
            "Round-trip time of storing a batch of this worker's outcomes.",
            buckets=ROUND_TRIP_BUCKETS,
            **into,
        )
        self.lease_renewals = prom.Counter(
            "conveyor_worker_lease_renewals",
            "Leases renewed, by result: renewed, or lost (the store no longer "
            "held the job under this worker's token).",
            ["result"],
            **into,
        )
        self.lease_renewal_failures = prom.Counter(
            "conveyor_worker_lease_renewal_failures",
            "Lease renewal round trips that failed (store error or timeout).",
            **into,
        )
        self.dispatch = {
            kind: prom.Counter(
                f"conveyor_worker_dispatch_{name}",
                f"RabbitMQ dispatch {what} of this worker process, by outcome.",
                ["outcome"],
                **into,
            )
            for kind, name, what in (
                ("message", "messages", "messages"),
                ("dead_letter", "dead_letters", "broker dead letters handled"),
            )
        }
        self._running: set[str] = set()
        #: (task, outcome) -> its counter and histogram children: ``labels()`` takes a
        #: lock and validates every call, and this runs twice per job.
        self._by_outcome: dict[tuple[str, str], tuple[Any, Any]] = {}

    def attach(self, events: EventBus) -> None:
        events.on("active", self._active)
        events.on("completed", self._completed)
        events.on("failed", self._failed)
        events.on("cancelled", self._cancelled)
        events.on("claimed", self._claimed)
        events.on("settled", self._settled)
        events.on("leases_renewed", self._leases_renewed)
        events.on("dispatch", self._dispatch)

    def _end(self, job: Job, outcome: str, duration: float | None) -> None:
        key = (job.task, outcome)
        children = self._by_outcome.get(key)
        if children is None:
            children = self._by_outcome[key] = (
                self.jobs.labels(*key),
                self.duration.labels(*key),
            )
        children[0].inc()
        if duration is not None:
            children[1].observe(duration)
        self._running.discard(job.id)
        self.running.set(len(self._running))

    def _active(self, event: str, job: Job, **_: Any) -> None:
        self._running.add(job.id)
        self.running.set(len(self._running))

    def _completed(self, event: str, job: Job, duration: float = 0.0, **_: Any) -> None:
        self._end(job, "completed", duration)

    def _failed(
        self, event: str, job: Job, will_retry: bool, duration: float = 0.0, **_: Any
    ) -> None:
        self._end(job, "retried" if will_retry else "failed", duration)

    def _cancelled(self, event: str, job: Job, **_: Any) -> None:
        if job.id in self._running:  # not a cancel of a waiting job by this process
            self._end(job, "cancelled", None)

    def _claimed(self, event: str, seconds: float, **_: Any) -> None:
        self.claim_latency.observe(seconds)

    def _settled(self, event: str, seconds: float, **_: Any) -> None:
        self.settle_latency.observe(seconds)

    def _leases_renewed(
        self, event: str, renewed: int, lost: int, error: BaseException | None, **_: Any
    ) -> None:
        if error is not None:
            self.lease_renewal_failures.inc()
            return
        if renewed:
            self.lease_renewals.labels("renewed").inc(renewed)
        if lost:
            self.lease_renewals.labels("lost").inc(lost)

    def _dispatch(self, event: str, kind: str, outcome: str, count: int, **_: Any) -> None:
        self.dispatch[kind].labels(outcome).inc(count)

    async def watch_loop_lag(self, every: float = 0.5) -> None:
        """Probe how late the loop runs a timer, until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time()
            await asyncio.sleep(every)
            self.loop_lag.set(max(0.0, loop.time() - asked - every))


def serve(port: int, registry: CollectorRegistry, host: str = "0.0.0.0") -> Any:
    """Serve ``registry`` at http://host:port/metrics from a daemon thread; the
    returned server's ``shutdown()`` stops it."""
    server, _thread = client().start_http_server(port, addr=host, registry=registry)
    return server


def multiprocess_registry(path: str) -> CollectorRegistry:
    """A registry that sums what the children write under ``path``."""
    client()
    from prometheus_client import CollectorRegistry, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    return registry


def child_exited(pid: int) -> None:
    """Drop a dead child's live gauges (running jobs, loop lag)."""
    path = os.environ.get(MULTIPROC_ENV)
    if path:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]


@contextlib.contextmanager
def multiprocess_dir() -> Iterator[str]:
    """A fresh directory for the children's values, named to them by the
    environment they inherit; removed at exit."""
    path = tempfile.mkdtemp(prefix="conveyor-metrics-")
    previous = os.environ.get(MULTIPROC_ENV)
    os.environ[MULTIPROC_ENV] = path
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = previous
        shutil.rmtree(path, ignore_errors=True)

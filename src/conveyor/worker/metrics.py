"""Prometheus metrics of one worker process (``conveyor worker --metrics-port``).

Built from the app's events (``active``, ``completed``, ``failed``,
``cancelled``, and ``dispatch`` with RabbitMQ dispatch) plus an event-loop lag
probe, so the worker itself carries no metrics code. With ``--processes N``
the supervisor serves one port for all children through prometheus_client's
multiprocess mode: it points ``PROMETHEUS_MULTIPROC_DIR`` at a fresh temporary
directory before starting them, each child writes its values there, and the
supervisor's collector sums them on every scrape (gauges count live children
only).

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


def _client() -> Any:
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
        prom = _client()
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

    def attach(self, events: EventBus) -> None:
        events.on("active", self._active)
        events.on("completed", self._completed)
        events.on("failed", self._failed)
        events.on("cancelled", self._cancelled)
        events.on("dispatch", self._dispatch)

    def _end(self, job: Job, outcome: str, duration: float | None) -> None:
        self.jobs.labels(job.task, outcome).inc()
        if duration is not None:
            self.duration.labels(job.task, outcome).observe(duration)
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
    server, _thread = _client().start_http_server(port, addr=host, registry=registry)
    return server


def multiprocess_registry(path: str) -> CollectorRegistry:
    """A registry that sums what the children write under ``path``."""
    _client()
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

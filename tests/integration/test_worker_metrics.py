"""The worker's own metrics of its store round trips (worker/metrics.py), fed by
a real worker's events: claim and settle latencies, lease renewals and the
renewal round trips that failed."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry
from worker_fixtures import Stack, running, settled

from conveyor.context import JobContext
from conveyor.errors import BackendUnavailable
from conveyor.job import JobState
from conveyor.worker.metrics import WorkerMetrics


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


async def test_renewals_failures_and_round_trips_are_counted(stack: Stack) -> None:
    # Lease 6 s: a renewal is due every 2 s, and the lease is trusted for 4.8 s,
    # room for one failed renewal and the retry half a second later.
    app = stack.app(lease="6s")
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    metrics.attach(app.events)
    renewed_after_failure = asyncio.Event()

    def on_renewal(event: str, error: BaseException | None, **_: Any) -> None:
        if error is None and value(registry, "conveyor_worker_lease_renewal_failures_total"):
            renewed_after_failure.set()

    app.on("leases_renewed", on_renewal)  # registered after the metrics: they count first

    @app.task("hold")
    async def hold(ctx: JobContext) -> None:
        await asyncio.wait_for(renewed_after_failure.wait(), 30)

    backend = await app.connect()
    renew = backend.renew_leases
    calls = 0

    async def fail_once(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise BackendUnavailable("injected: the store is unreachable")
        return await renew(*args, **kwargs)

    backend.renew_leases = fail_once  # type: ignore[method-assign]  # one injected fault
    job = await app.enqueue("hold")
    async with running(app):
        done = await settled(job, timeout=40)
    assert done.state is JobState.COMPLETED
    assert value(registry, "conveyor_worker_lease_renewal_failures_total") == 1
    assert value(registry, "conveyor_worker_lease_renewals_total", result="renewed") >= 1
    assert value(registry, "conveyor_worker_lease_renewals_total", result="lost") == 0
    assert value(registry, "conveyor_worker_claim_seconds_count") >= 1
    assert value(registry, "conveyor_worker_settle_seconds_count") >= 1
    assert value(registry, "conveyor_worker_settle_seconds_sum") > 0

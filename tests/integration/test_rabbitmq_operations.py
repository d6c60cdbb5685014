"""Operating RabbitMQ dispatch, against the real broker and PostgreSQL:
``conveyor serve``'s health checks report the broker, ``/metrics`` the dispatch
lag and the broker's depths, ``conveyor queues`` and the dashboard's queues
page the broker's depth beside the store's counts; with the broker down, each
says so and the store's answers still stand."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from rabbitmq_fixtures import Place, amqp_url, place

from conveyor import Conveyor
from conveyor.dispatch import Dispatcher
from conveyor.server import create_app

__all__ = ["amqp_url", "place"]  # fixtures

pytestmark = pytest.mark.timeout(60)

CLOSED = "amqp://guest:guest@127.0.0.1:1/%2F"  # nothing listens on port 1

Serve = Callable[[str], Awaitable[tuple[Conveyor, httpx.AsyncClient]]]


@pytest.fixture
async def serve(place: Place) -> AsyncIterator[Serve]:
    """``await serve(dispatch_url)``: the HTTP service of an app on the place's store."""
    opened: list[Any] = []

    async def start(dispatch: str) -> tuple[Conveyor, httpx.AsyncClient]:
        app = Conveyor(place.url, dispatch=dispatch)

        @app.task("work")
        async def work(ctx: Any) -> None:
            return None

        web = create_app(app)
        lifespan = web.router.lifespan_context(web)
        await lifespan.__aenter__()
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web), base_url="http://localhost"
        )
        opened.append((lifespan, client))
        return app, client

    yield start
    for lifespan, client in reversed(opened):
        await client.aclose()
        await lifespan.__aexit__(None, None, None)


def metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


async def cli_queues(place: Place, dispatch: str) -> list[dict[str, Any]]:
    env = {**os.environ, "CONVEYOR_URL": place.url}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "conveyor",
        "queues",
        "--json",
        "--dispatch",
        dispatch,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


async def test_health_metrics_cli_and_dashboard_report_the_broker(
    place: Place, serve: Serve
) -> None:
    app, client = await serve(place.dispatch())
    place.queues.add("default")
    jobs = [await app.enqueue("work") for _ in range(3)]
    await asyncio.sleep(0.3)  # no relay yet: the jobs wait for their publish

    scrape = (await client.get("/metrics")).text
    lag = metric(scrape, "conveyor_dispatch_lag_seconds")
    assert lag is not None
    assert lag >= 0.3
    assert metric(scrape, "conveyor_broker_up") == 1.0
    assert metric(scrape, 'conveyor_broker_queue_messages{queue="default"}') is None  # undeclared

    relay = Dispatcher(place.dispatch(), app.backend, worker_queue_ttl=60.0, roles=("relay",))
    await relay.start()
    try:
        deadline = time.monotonic() + 10
        while relay.relay is None or relay.relay.published < len(jobs):
            assert time.monotonic() < deadline, "the relay did not publish"
            await asyncio.sleep(0.05)
    finally:
        await relay.close()

    ready = await client.get("/health/ready")
    assert ready.status_code == 200
    assert ready.json()["broker"]["status"] == "up"
    backend = await client.get("/health/backend")
    assert backend.status_code == 200
    body = backend.json()
    assert body["status"] in ("healthy", "degraded")
    assert body["broker"]["status"] == "up"
    assert body["broker"]["latency_ms"] >= 0
    overall = (await client.get("/health")).json()
    assert overall["checks"]["broker"] == "healthy"

    scrape = (await client.get("/metrics")).text
    assert metric(scrape, "conveyor_dispatch_lag_seconds") == 0.0
    # One message names the three jobs (the relay publishes a message per batch).
    assert metric(scrape, 'conveyor_broker_queue_messages{queue="default"}') == 1.0
    assert metric(scrape, 'conveyor_broker_queue_consumers{queue="default"}') == 0.0
    assert metric(scrape, "conveyor_broker_dead_letters") == 0.0

    rows = {row["name"]: row for row in await cli_queues(place, place.dispatch())}
    assert rows["default"]["counts"]["waiting"] == 3
    assert rows["default"]["broker"] == {"messages": 1, "consumers": 0}

    page = await client.get("/queues")
    assert page.status_code == 200
    assert '<td class="num" data-broker>1</td>' in page.text


async def test_with_the_broker_down_each_view_says_so_and_the_store_still_answers(
    place: Place, serve: Serve
) -> None:
    dispatch = f"{CLOSED}?prefix={place.prefix}"
    app, client = await serve(dispatch)
    await app.enqueue("work")

    ready = await client.get("/health/ready")
    assert ready.status_code == 200  # enqueue and the store's wake-ups go on
    assert ready.json()["broker"]["status"] == "unavailable"
    backend = await client.get("/health/backend")
    assert backend.status_code == 200
    assert backend.json()["status"] == "degraded"
    assert "broker" in backend.json()["broker"]["error"]
    overall = (await client.get("/health")).json()
    assert overall["checks"]["broker"] == "degraded"
    assert overall["status"] == "degraded"

    scrape = (await client.get("/metrics")).text
    assert metric(scrape, "conveyor_broker_up") == 0.0
    lag = metric(scrape, "conveyor_dispatch_lag_seconds")
    assert lag is not None
    assert lag > 0.0
    assert metric(scrape, 'conveyor_queue_depth{queue="default",state="waiting"}') == 1.0

    rows = await cli_queues(place, dispatch)
    assert rows[0]["counts"]["waiting"] == 1
    assert rows[0]["broker"] is None
    assert rows[0]["broker_error"].startswith("broker:")

    page = await client.get("/queues")
    assert page.status_code == 200
    assert "data-broker-error" in page.text

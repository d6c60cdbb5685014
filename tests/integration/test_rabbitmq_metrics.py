"""RabbitMQ dispatch counts, scraped: a ``conveyor worker --dispatch
--metrics-port`` process serves what its relay, consumer and dead-letter
handler did, and ``conveyor serve``'s ``/metrics`` the same totals read from
the store (every process's flushes)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import httpx
import pytest
from chaos_helpers import Cluster
from rabbitmq_fixtures import Place, amqp_url, place

from conveyor import Conveyor
from conveyor.dispatch.counts import OUTCOMES
from conveyor.job import JobState
from conveyor.server import create_app
from support.metrics import sample

__all__ = ["amqp_url", "place"]  # fixtures

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SERVED = 5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
async def world(tmp_path: Path, place: Place) -> AsyncIterator[Cluster]:
    (tmp_path / "world").mkdir()
    async with Cluster(tmp_path / "world") as cluster:
        cluster.url = place.url
        yield cluster


async def scrape_port(port: int) -> str:
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            response = await client.get(f"http://127.0.0.1:{port}/metrics")
    except httpx.TransportError:
        return ""
    assert response.status_code == 200
    return response.text


async def publish_malformed_dead_letter(where: Place) -> None:
    connection = await aio_pika.connect(where.amqp_url)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange(f"{where.prefix}dead-letter")
        await exchange.publish(aio_pika.Message(b"not a dispatch message"), routing_key="")


async def test_the_worker_port_and_serve_metrics_count_what_dispatch_did(
    world: Cluster, place: Place
) -> None:
    port = free_port()
    env = {
        "CONVEYOR_DISPATCH": place.dispatch(),
        "CONVEYOR_WORKER_QUEUE_TTL": "1s",
        "CONVEYOR_POLL_INTERVAL": "30s",  # deliveries do the waking
    }
    worker = world.start_worker(4, env=env, extra=["--quiet", "--metrics-port", str(port)])
    app = await world.app()
    place.queues.add("default")
    await world.wait_until(lambda: app.workers(), 60, "the worker registered")
    for info, _ in await app.workers():
        place.queues.add(f"worker.{info.id}")
    place.queues.add("worker.gone")

    served = [await app.enqueue("chaos.sleep", {"seconds": 0}) for _ in range(SERVED)]
    lost = await app.enqueue("chaos.sleep", {"seconds": 0}, worker="gone")
    for job in served:
        assert (await app.wait_for_job(job.id, timeout=30)).state is JobState.COMPLETED
    failed = await app.wait_for_job(lost.id, timeout=30)
    assert failed.state is JobState.FAILED
    await publish_malformed_dead_letter(place)
    last = [""]

    def dispatch_lines() -> str:
        return "\n".join(line for line in last[0].splitlines() if "dispatch" in line)

    def counts(text: str, prefix: str) -> dict[tuple[str, str], float]:
        found = {}
        for kind, outcomes in OUTCOMES.items():
            name = f"{prefix}_{'messages' if kind == 'message' else 'dead_letters'}_total"
            for outcome in outcomes:
                value = sample(text, name, outcome=outcome)
                found[kind, outcome] = value or 0.0
        return found

    async def worker_counted() -> dict[tuple[str, str], float] | None:
        text = last[0] = await scrape_port(port)
        seen = counts(text, "conveyor_worker_dispatch")
        done = seen["dead_letter", "expired"] == 1 and seen["dead_letter", "dropped"] == 1
        return seen if done else None

    seen = await world.wait_until(
        worker_counted, 30, lambda: f"the worker's dispatch counts in:\n{dispatch_lines()}"
    )
    # A job the worker claimed on the store's own wake-up before the relay took
    # it is never published: how many were is the race's, not the test's.
    assert 1 <= seen["message", "confirmed"] == seen["message", "published"] <= SERVED + 1
    assert seen["message", "delivered"] <= seen["message", "confirmed"]
    assert seen["message", "returned"] == seen["message", "unconfirmed"] == 0
    assert seen["dead_letter", "ignored"] == seen["dead_letter", "requeued"] == 0
    assert worker.alive, worker.tail()

    # conveyor serve reads the same totals from the store (flushed each second).
    viewer = Conveyor(place.url, dispatch=place.dispatch())
    web = create_app(viewer)
    lifespan = web.router.lifespan_context(web)
    await lifespan.__aenter__()
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web), base_url="http://localhost"
        ) as client:

            async def serve_counted() -> bool:
                last[0] = (await client.get("/metrics")).text
                return counts(last[0], "conveyor_dispatch") == seen

            await world.wait_until(
                serve_counted,
                30,
                lambda: f"serve's dispatch counts equal to {seen} in:\n{dispatch_lines()}",
            )
    finally:
        await lifespan.__aexit__(None, None, None)
    # Every outcome is there on serve, 0 before its first count.
    assert sample(last[0], "conveyor_dispatch_messages_total", outcome="reconciled") == 0

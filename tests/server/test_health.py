"""Health endpoints: probes, backend latency, queue thresholds, min_workers, the
aggregate, and 503 while the backend cannot be reached, 200 once it can."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conveyor.backends.base import WorkerInfo
from support.services import missing_service

from .conftest import READ, Serve, auth


async def test_probes_are_open(serve: Serve) -> None:
    _, client = await serve()
    for path, status in (
        ("/health/live", "alive"),
        ("/health/startup", "started"),
        ("/health/ready", "ready"),
    ):
        response = await client.get(path)
        assert response.status_code == 200
        assert response.json()["status"] == status


#: A latency threshold no pause of the host can reach: "healthy" must not depend on timing.
GENEROUS = 30.0


async def test_backend_latency_healthy_then_degraded(serve: Serve) -> None:
    _, client = await serve(health_backend_latency=GENEROUS)
    body = (await client.get("/health/backend", headers=auth(READ))).json()
    assert body["status"] == "healthy"
    assert 0 <= body["latency_ms"] < GENEROUS * 1000
    _, slow_client = await serve(health_backend_latency=0)  # every ping is "slow"
    slow = await slow_client.get("/health/backend", headers=auth(READ))
    assert slow.status_code == 200
    assert slow.json()["status"] == "degraded"


async def test_queues_report_counts_ages_and_workers(serve: Serve) -> None:
    app, client = await serve()
    await app.enqueue("add", {"a": 1, "b": 2})
    await app.enqueue("add", {"a": 1, "b": 2}, delay=3600)
    await app.enqueue("fail")
    await app.drain()
    await app.enqueue("mail.send", {"to": "x"})
    backend = await app.connect()
    await backend.record_heartbeat(WorkerInfo("w-9", "box-9", 99, ["default"], 5, 0, 1.0))
    response = await client.get("/health/queues", headers=auth(READ))
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "healthy"
    assert body["queues"]["default"] == {
        "waiting": 0,
        "active": 0,
        "failed": 1,
        "delayed": 1,
        "oldest_waiting_s": 0.0,
    }
    assert body["queues"]["emails"]["waiting"] == 1
    assert 0 <= body["queues"]["emails"]["oldest_waiting_s"] < 60
    worker = body["workers"]["w-9"]
    assert (worker["alive"], worker["pid"], worker["host"]) == (True, 99, "box-9")
    assert worker["last_seen"] > 0


async def test_queue_thresholds_and_min_workers_make_it_503(serve: Serve) -> None:
    app, client = await serve(queue_max_waiting=5, queue_thresholds={"emails": {"max_waiting": 1}})
    await app.enqueue_many([("mail.send", {"to": "x"}), ("mail.send", {"to": "y"})])
    await app.enqueue_many([("add", {"a": 1, "b": 1})] * 3)
    response = await client.get("/health/queues", headers=auth(READ))
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unhealthy"
    assert len(body["problems"]) == 1  # default (3 <= 5) passes, emails (2 > 1) does not
    assert "'emails'" in body["problems"][0]

    app2, aged = await serve(queue_max_age="1ms")
    await app2.enqueue("add", {"a": 1, "b": 1}, run_at=1.0)  # due since 1970
    response = await aged.get("/health/queues", headers=auth(READ))
    assert response.status_code == 503
    assert "oldest waiting job" in response.json()["problems"][0]

    app3, staffed = await serve(min_workers=1)
    short = await staffed.get("/health/queues", headers=auth(READ))
    assert short.status_code == 503
    assert "min_workers=1" in short.json()["problems"][0]
    backend = await app3.connect()
    await backend.record_heartbeat(WorkerInfo("w-1", "h", 1, ["default"], 1, 0, 1.0))
    assert (await staffed.get("/health/queues", headers=auth(READ))).status_code == 200


async def test_aggregate_health(serve: Serve) -> None:
    app, client = await serve(health_backend_latency=GENEROUS)
    body = (await client.get("/health", headers=auth(READ))).json()
    assert body["status"] == "healthy"
    assert body["checks"] == {
        "backend": "healthy",
        "workers": "healthy",
        "queues": "healthy",
        "dead_letters": "healthy",
    }
    await app.enqueue("fail")
    await app.drain()
    await app.enqueue("add", {"a": 1, "b": 1})  # waits, and no worker is alive
    response = await client.get("/health", headers=auth(READ))
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "degraded"
    assert body["checks"]["dead_letters"] == "degraded"
    assert body["checks"]["workers"] == "degraded"
    assert body["details"]["dead_letters"] == {"total": 1, "by_queue": {"default": 1}}

    _, strict = await serve(min_workers=2)
    response = await strict.get("/health", headers=auth(READ))
    assert response.status_code == 503
    assert response.json()["status"] == "unhealthy"
    assert response.json()["checks"]["workers"] == "unhealthy"


async def test_backend_down_is_503_and_back_to_200_when_it_returns(
    serve: Serve, tmp_path: Path
) -> None:
    """The SQLite file's folder cannot be created (a plain file is in the way,
    like a volume that is not mounted): every check that needs the backend
    fails until the folder can be made, and again once it is gone."""
    storage = tmp_path / "volume"
    storage.write_text("not a folder")
    app, client = await serve(url=f"sqlite:///{storage / 'jobs.db'}")
    checks = ["/health/ready", "/health/queues", "/health/backend", "/health"]
    for path in checks:
        response = await client.get(path, headers=auth(READ))
        assert response.status_code == 503, path
        assert response.json()["status"] in ("unavailable", "unhealthy")
    assert (await client.get("/health/live")).status_code == 200
    assert (await client.get("/metrics", headers=auth(READ))).status_code == 503

    storage.unlink()
    for path in checks:
        assert (await client.get(path, headers=auth(READ))).status_code == 200, path
    await app.enqueue("add", {"a": 1, "b": 2})
    assert (await client.get("/health/ready")).status_code == 200

    # The storage goes away again: the app reconnects and cannot open it.
    await app.close()
    shutil.rmtree(storage)
    storage.write_text("not a folder")
    for path in checks:
        assert (await client.get(path, headers=auth(READ))).status_code == 503, path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_redis(port: int, folder: Path) -> subprocess.Popen[bytes]:
    """A Redis of this test's own (never the shared one), answering on ``port``."""
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(folder),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            assert proc.poll() is None, "redis-server exited"
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.02)


@pytest.mark.slow
async def test_ready_and_queues_follow_a_real_server_stopping_and_returning(
    serve: Serve, tmp_path: Path
) -> None:
    if shutil.which("redis-server") is None:
        missing_service("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    redis = start_redis(port, tmp_path)
    try:
        app, client = await serve(url=f"redis://127.0.0.1:{port}/0")
        await app.enqueue("add", {"a": 1, "b": 2})
        assert (await client.get("/health/ready")).status_code == 200
        queues = await client.get("/health/queues", headers=auth(READ))
        assert queues.status_code == 200
        assert queues.json()["queues"]["default"]["waiting"] == 1

        redis.terminate()
        redis.wait(timeout=10)
        ready = await client.get("/health/ready")
        assert ready.status_code == 503
        assert ready.json()["status"] == "unavailable"
        down = await client.get("/health/queues", headers=auth(READ))
        assert down.status_code == 503
        assert down.json()["status"] == "unhealthy"

        redis = start_redis(port, tmp_path)  # back, empty (no persistence)
        deadline = time.monotonic() + 20
        while (await client.get("/health/ready")).status_code != 200:
            assert time.monotonic() < deadline, "/health/ready stayed 503"
            await asyncio.sleep(0.1)
        back = await client.get("/health/queues", headers=auth(READ))
        assert back.status_code == 200
        assert back.json()["status"] == "healthy"
    finally:
        redis.terminate()
        redis.wait(timeout=10)

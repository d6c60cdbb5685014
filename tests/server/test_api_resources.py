"""``/api/v1/queues``, ``/workers``, ``/circuits`` and ``/schedules``."""

from __future__ import annotations

import httpx

from conveyor.app import Conveyor
from conveyor.backends.base import ClaimRequest, WorkerInfo
from conveyor.context import JobContext

from .conftest import ADMIN, READ, Serve, auth


async def test_queues_stats_pause_resume(served: tuple[Conveyor, httpx.AsyncClient]) -> None:
    app, client = served
    await app.enqueue("mail.send", {"to": "a@b.c"})
    await app.enqueue("add", {"a": 1, "b": 2})
    listed = (await client.get("/api/v1/queues", headers=auth(READ))).json()["queues"]
    by_name = {q["name"]: q for q in listed}
    assert by_name["emails"]["counts"]["waiting"] == 1
    assert by_name["emails"]["paused"] is False
    assert by_name["default"]["counts"]["completed"] == 0

    paused = await client.post("/api/v1/queues/emails/pause", headers=auth(ADMIN))
    assert paused.status_code == 200
    assert paused.json()["paused"] is True
    assert await app.drain() == 1  # only the default queue's job ran
    resumed = await client.post("/api/v1/queues/emails/resume", headers=auth(ADMIN))
    assert resumed.json()["paused"] is False
    assert await app.drain() == 1


async def test_workers_from_heartbeats(served: tuple[Conveyor, httpx.AsyncClient]) -> None:
    app, client = served
    backend = await app.connect()
    await backend.record_heartbeat(
        WorkerInfo("w-1", "box-1", 4242, ["default"], 10, 2, 1000.0, heartbeat_interval=10)
    )
    workers = (await client.get("/api/v1/workers", headers=auth(READ))).json()["workers"]
    assert len(workers) == 1
    (worker,) = workers
    assert (worker["id"], worker["host"], worker["pid"], worker["alive"]) == (
        "w-1",
        "box-1",
        4242,
        True,
    )
    assert worker["active"] == 2


async def test_circuits_list_and_reset(served: tuple[Conveyor, httpx.AsyncClient]) -> None:
    app, client = served
    for _ in range(2):  # circuit_threshold=2 on "fail"
        await app.enqueue("fail")
    await app.drain()
    circuits = (await client.get("/api/v1/circuits", headers=auth(READ))).json()["circuits"]
    assert [(c["task"], c["state"]) for c in circuits] == [("fail", "open")]
    reset = await client.post("/api/v1/circuits/fail/reset", headers=auth(ADMIN))
    assert reset.status_code == 200
    assert reset.json()["state"] == "closed"
    circuits = (await client.get("/api/v1/circuits", headers=auth(READ))).json()["circuits"]
    assert all(c["state"] == "closed" for c in circuits)


async def test_schedules_list_get_pause_resume_trigger_and_change_cron(
    serve: Serve,
) -> None:
    app, client = await serve()
    app.schedule("sum-often", cron="*/5 * * * *", task="add", payload={"a": 1, "b": 2})
    await app.scheduler().sync()

    listed = (await client.get("/api/v1/schedules", headers=auth(READ))).json()["schedules"]
    assert [(s["name"], s["cron"], s["paused"]) for s in listed] == [
        ("sum-often", "*/5 * * * *", False)
    ]
    one = (
        await client.get("/api/v1/schedules/sum-often", params={"next": 3}, headers=auth(READ))
    ).json()
    assert len(one["next_fires"]) == 3
    assert all(round(t) % 300 == 0 for t in one["next_fires"])

    paused = await client.post("/api/v1/schedules/sum-often/pause", headers=auth(ADMIN))
    assert paused.json()["paused"] is True
    assert (await app.schedules.get("sum-often")).paused
    resumed = await client.post("/api/v1/schedules/sum-often/resume", headers=auth(ADMIN))
    assert resumed.json()["paused"] is False

    triggered = await client.post("/api/v1/schedules/sum-often/trigger", headers=auth(ADMIN))
    assert triggered.status_code == 201
    job = await app.get_job(triggered.json()["id"])
    assert job is not None
    assert (job.task, job.payload) == ("add", {"a": 1, "b": 2})

    changed = await client.post(
        "/api/v1/schedules/sum-often/cron", json={"cron": "0 * * * *"}, headers=auth(ADMIN)
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["cron"] == "0 * * * *"
    assert (await app.schedules.get("sum-often")).cron == "0 * * * *"
    every = await client.post(
        "/api/v1/schedules/sum-often/cron", json={"every": "30s"}, headers=auth(ADMIN)
    )
    assert every.json()["every"] == 30.0

    invalid = await client.post(
        "/api/v1/schedules/sum-often/cron", json={"cron": "61 * * * *"}, headers=auth(ADMIN)
    )
    assert invalid.status_code == 422
    assert invalid.json()["error"]["type"] == "invalid_schedule"
    assert (await app.schedules.get("sum-often")).every == 30.0  # unchanged
    both = await client.post(
        "/api/v1/schedules/sum-often/cron",
        json={"cron": "* * * * *", "every": 5},
        headers=auth(ADMIN),
    )
    assert both.status_code == 422
    missing = await client.post("/api/v1/schedules/nope/pause", headers=auth(ADMIN))
    assert missing.status_code == 404
    assert "nope" in missing.json()["error"]["message"]


async def test_queues_list_running_jobs_per_concurrency_key(serve: Serve) -> None:
    app, client = await serve(url="memory://api-keys")
    for key in ("acct-1", "acct-1", "acct-2"):
        await app.enqueue("add", {"a": 1, "b": 1}, concurrency_key=key)
    backend = await app.connect()
    await backend.claim_jobs(ClaimRequest(worker_id="w", queues=["default"], limit=10, lease=30))
    body = (await client.get("/api/v1/queues", headers=auth(READ))).json()
    assert body["keys"] == [
        {"task": "add", "key": "acct-1", "running": 2, "waiting": None, "cap": None},
        {"task": "add", "key": "acct-2", "running": 1, "waiting": None, "cap": None},
    ]
    assert body["rates"] == []


async def test_queues_list_waiting_per_key_and_rate_windows(serve: Serve) -> None:
    app, client = await serve()

    @app.task("sync", key_concurrency=1, concurrency_key="tenant")
    async def sync(ctx: JobContext) -> None: ...

    @app.task("call", rate_limit="2/m", rate_limit_key="tenant")
    async def call(ctx: JobContext) -> None: ...

    for tenant in ("t-1", "t-1", "t-1", "t-2"):
        await app.enqueue("sync", tenant=tenant)
    for tenant in ("t-1", "t-1", "t-1", "t-2"):
        await app.enqueue("call", tenant=tenant)
    backend = await app.connect()
    await backend.claim_jobs(
        ClaimRequest(
            worker_id="w",
            queues=["default"],
            limit=10,
            lease=30,
            key_limits={"sync": 1},
            key_rate_limits=app.key_rate_limits(),
        )
    )
    body = (await client.get("/api/v1/queues", headers=auth(READ))).json()
    running = [k for k in body["keys"] if k["task"] == "sync"]
    assert running == [
        {"task": "sync", "key": "t-1", "running": 1, "waiting": 2, "cap": 1},
        {"task": "sync", "key": "t-2", "running": 1, "waiting": 0, "cap": 1},
    ]
    assert body["rates"] == [
        {"task": "call", "key": "t-1", "used": 2, "limit": 2, "period": 60.0},
        {"task": "call", "key": "t-2", "used": 1, "limit": 2, "period": 60.0},
    ]

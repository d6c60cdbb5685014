"""Fill a dashboard app's backend with real runs: jobs completed and failed by
a real (in-process) worker, which also stores throughput statistics; waiting
jobs in a paused queue; an open circuit; a worker heartbeat; the schedules."""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass

from conveyor.app import Conveyor
from conveyor.backends.base import WorkerInfo

from .apps.shop import XSS, XSS_TASK


@dataclass(slots=True)
class Seeded:
    failed_ids: list[str]
    waiting: int


async def seed(app: Conveyor) -> Seeded:
    backend = await app.connect()
    await app.enqueue_many([("mail.send", {"to": f"user{i}@example.com"}) for i in range(6)])
    await app.enqueue_many([("report.build", {"pages": i}) for i in range(3)])
    failing = await app.enqueue_many(
        [
            (
                "pay.charge",
                {"note": f"order {i}"},
                {"tenant": "org-1", "idempotency_key": f"pay-{i}"},
            )
            for i in range(3)
        ]
    )
    evil = await app.enqueue(XSS_TASK, {"note": XSS, "html": XSS}, tenant="org-<b>2</b>")
    await app.enqueue_many([("flaky.api", {}), ("flaky.api", {})])
    await app.drain()
    for _ in range(50):  # retries wait out their (10 ms) backoff as delayed jobs
        if not await app.count_jobs("delayed"):
            break
        await asyncio.sleep(0.02)
        await app.drain()
    # Waiting work that no worker takes: a paused queue.
    await app.pause_queue("reports")
    await app.enqueue_many([("report.build", {"pages": 9}, {"queue": "reports"})] * 4)
    await backend.record_heartbeat(
        WorkerInfo(
            id="web-1.4242",
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=["default", "emails"],
            concurrency=50,
            active=0,
            started_at=await backend.now() - 3600,
            heartbeat_interval=3600.0,
        )
    )
    await app.scheduler(install_signals=False).sync()
    return Seeded([job.id for job in [*failing, evil]], waiting=4)

"""procrastinate on PostgreSQL (psycopg 3 connector). Its worker::

    procrastinate --app=benchmarks.peers.procrastinate_peer.app --log-level warning \\
        worker --concurrency 50

Concurrency 50 (procrastinate's default is 1) in every workload; LISTEN/NOTIFY
on (its default), the polling fallback at its default 5 s; finished jobs kept
(its default). The schema is applied to each fresh database first. Bulk
enqueue: ``Task.batch_defer_async`` (one INSERT per call), 5,000 jobs per call.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, ClassVar

import procrastinate

from benchmarks.harness import CONCURRENCY, ENQUEUE_BATCH, W3_SLEEP
from benchmarks.peers import recorder
from benchmarks.peers.base import PeerSide, cli

URL = os.environ.get("BENCH_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def build(url: str) -> tuple[procrastinate.App, dict[str, Any]]:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="bench.noop")
    async def noop() -> None:
        recorder.noop()

    @app.task(name="bench.stamp")
    async def stamp(i: int) -> None:
        recorder.stamp(i)

    @app.task(name="bench.sleep")
    async def sleep() -> None:
        recorder.started()
        await asyncio.sleep(W3_SLEEP)
        recorder.done()

    return app, {"noop": noop, "stamp": stamp, "sleep": sleep}


app, _tasks = build(URL)


class ProcrastinateSide(PeerSide):
    name = "procrastinate"
    kind = "postgres"
    settings: ClassVar[dict[str, str]] = {
        "worker": "procrastinate --app=benchmarks.peers.procrastinate_peer.app "
        "--log-level warning worker --concurrency 50",
        "enqueue": "Task.batch_defer_async, 5,000 jobs per call",
    }

    def setup(self) -> None:
        self.app, self.tasks = build(self.url)
        self.run(self.app.open_async())
        self.run(self.app.schema_manager.apply_schema_async())

    def teardown(self) -> None:
        self.run(self.app.close_async())

    def worker_cmd(self, workload: str, index: int = 0) -> list[str]:
        app = ["--app=benchmarks.peers.procrastinate_peer.app", "--log-level", "warning"]
        return [cli("procrastinate"), *app, "worker", "--concurrency", str(CONCURRENCY)]

    def enqueue_bulk(self, task: str, n: int) -> None:
        async def go() -> None:
            left = n
            while left:
                size = min(ENQUEUE_BATCH, left)
                await self.tasks[task].batch_defer_async(*({} for _ in range(size)))
                left -= size

        self.run(go())

    def enqueue_stamp(self, i: int) -> None:
        self.run(self.tasks["stamp"].defer_async(i=i))

"""arq on Redis. Its worker loads ``WorkerSettings``::

    arq benchmarks.peers.arq_peer.WorkerSettings

``max_jobs = 50`` (arq's concurrency; default 10); everything else is arq's
defaults (``poll_delay`` 0.5 s, results kept 1 h). arq has no bulk enqueue:
``enqueue_job`` calls, 100 in flight at a time.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, ClassVar

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings

from benchmarks.harness import CONCURRENCY, W3_SLEEP
from benchmarks.peers import recorder
from benchmarks.peers.base import PeerSide, cli, gather_in_chunks

URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")
ENQUEUE_IN_FLIGHT = 100


async def noop(ctx: dict[str, Any]) -> None:
    recorder.noop()


async def stamp(ctx: dict[str, Any], i: int) -> None:
    recorder.stamp(i)


async def sleep(ctx: dict[str, Any]) -> None:
    recorder.started()
    await asyncio.sleep(W3_SLEEP)
    recorder.done()


class WorkerSettings:
    functions: ClassVar[list[Any]] = [noop, stamp, sleep]
    redis_settings = RedisSettings.from_dsn(URL)
    max_jobs = CONCURRENCY


class ArqSide(PeerSide):
    name = "arq"
    kind = "redis"
    settings: ClassVar[dict[str, str]] = {
        "worker": "arq benchmarks.peers.arq_peer.WorkerSettings (max_jobs=50)",
        "enqueue": "enqueue_job, 100 calls in flight (no bulk API)",
    }

    def setup(self) -> None:
        self.pool: ArqRedis = self.run(create_pool(RedisSettings.from_dsn(self.url)))

    def teardown(self) -> None:
        self.run(self.pool.aclose())

    def worker_cmd(self, workload: str, index: int = 0) -> list[str]:
        return [cli("arq"), "benchmarks.peers.arq_peer.WorkerSettings"]

    def enqueue_bulk(self, task: str, n: int) -> None:
        self.run(gather_in_chunks(lambda: self.pool.enqueue_job(task), n, ENQUEUE_IN_FLIGHT))

    def enqueue_stamp(self, i: int) -> None:
        self.run(self.pool.enqueue_job("stamp", i))

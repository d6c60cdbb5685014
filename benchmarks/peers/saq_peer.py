"""SAQ on Redis. Its worker loads ``settings``::

    saq benchmarks.peers.saq_peer.settings --workers 1

``concurrency = 50`` (SAQ's default is 10); everything else is SAQ's defaults.
SAQ has no bulk enqueue (``Queue.map`` also waits for the results):
``Queue.enqueue`` calls, 100 in flight at a time.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, ClassVar

from saq import Queue

from benchmarks.harness import CONCURRENCY, W3_SLEEP
from benchmarks.peers import recorder
from benchmarks.peers.base import PeerSide, cli, gather_in_chunks

URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")
ENQUEUE_IN_FLIGHT = 100


async def noop(ctx: dict[str, Any]) -> None:
    recorder.noop()


async def stamp(ctx: dict[str, Any], *, i: int) -> None:
    recorder.stamp(i)


async def sleep(ctx: dict[str, Any]) -> None:
    recorder.started()
    await asyncio.sleep(W3_SLEEP)
    recorder.done()


settings: dict[str, Any] = {
    "queue": Queue.from_url(URL),
    "functions": [noop, stamp, sleep],
    "concurrency": CONCURRENCY,
}


class SaqSide(PeerSide):
    name = "saq"
    kind = "redis"
    settings: ClassVar[dict[str, str]] = {
        "worker": "saq benchmarks.peers.saq_peer.settings --workers 1 (concurrency=50)",
        "enqueue": "Queue.enqueue, 100 calls in flight (no bulk API)",
    }

    def setup(self) -> None:
        self.queue = Queue.from_url(self.url)
        self.run(self.queue.connect())

    def teardown(self) -> None:
        self.run(self.queue.disconnect())

    def worker_cmd(self, workload: str, index: int = 0) -> list[str]:
        return [cli("saq"), "benchmarks.peers.saq_peer.settings", "--workers", "1"]

    def enqueue_bulk(self, task: str, n: int) -> None:
        self.run(gather_in_chunks(lambda: self.queue.enqueue(task), n, ENQUEUE_IN_FLIGHT))

    def enqueue_stamp(self, i: int) -> None:
        self.run(self.queue.enqueue("stamp", i=i))

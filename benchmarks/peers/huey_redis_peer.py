"""Huey on Redis: ``RedisHuey`` (blocking pops, its default) and its own consumer::

    huey_consumer benchmarks.peers.huey_redis_peer.huey -k thread -w 1 -q    (W1)
    huey_consumer benchmarks.peers.huey_redis_peer.huey -k thread -w 50 -q   (W2, W3)

Thread workers, Huey's documented choice for I/O-bound tasks without gevent;
W1 with one thread, as on SQLite. Huey has no bulk enqueue: ``Task.map`` (a loop
of single enqueues) is its fastest way.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any, ClassVar

from huey import RedisHuey

from benchmarks.harness import CONCURRENCY, PY, W3_SLEEP
from benchmarks.peers import recorder
from benchmarks.peers.base import PeerSide

URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")
W1_WORKERS = 1


def build(url: str) -> tuple[RedisHuey, dict[str, Any]]:
    huey = RedisHuey("bench", url=url)

    @huey.task(name="bench.noop")
    def noop() -> None:
        recorder.noop()

    @huey.task(name="bench.stamp")
    def stamp(i: int) -> None:
        recorder.stamp(i)

    @huey.task(name="bench.sleep")
    def sleep() -> None:
        recorder.started()
        time.sleep(W3_SLEEP)
        recorder.done()

    return huey, {"noop": noop, "stamp": stamp, "sleep": sleep}


huey, _tasks = build(URL)


class HueyRedisSide(PeerSide):
    name = "huey"
    kind = "redis"
    stop_signal = signal.SIGINT  # Huey's graceful stop; SIGTERM stops at once
    w1_workers = W1_WORKERS  # run.py --huey-w1-workers
    settings: ClassVar[dict[str, str]] = {
        "worker": "huey_consumer benchmarks.peers.huey_redis_peer.huey -k thread "
        "-w 1 (W1) / 50 (W2, W3) -q",
        "enqueue": "Task.map (a loop of single enqueues; no bulk API)",
    }

    def setup(self) -> None:
        self.huey, self.tasks = build(self.url)

    def teardown(self) -> None:
        self.huey.storage.conn.close()

    def worker_cmd(self, workload: str, index: int = 0) -> list[str]:
        workers = self.w1_workers if workload == "w1" else CONCURRENCY
        consumer = [PY, "-m", "huey.bin.huey_consumer", "benchmarks.peers.huey_redis_peer.huey"]
        return [*consumer, "-k", "thread", "-w", str(workers), "-q"]

    def enqueue_bulk(self, task: str, n: int) -> None:
        self.tasks[task].map([()] * n)

    def enqueue_stamp(self, i: int) -> None:
        self.tasks["stamp"](i)

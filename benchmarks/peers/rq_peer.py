"""RQ. Its workers::

    rq worker --url URL --logging_level WARNING               (W1: one worker)
    rq worker-pool --url URL -n 50 --logging-level WARNING    (W2, W3: 50 workers)

RQ's default ``Worker`` forks a work horse per job (its documented isolation
model); a worker runs one job at a time, so concurrency 50 is RQ's worker pool of
50. Bulk enqueue: ``Queue.enqueue_many`` on one pipeline per 5,000 jobs (RQ's
documented bulk API). RQ drains slowly, so W1 and scale run it on at most
1,000 jobs by default (``--peer-w1-jobs rq=N`` to change it).
"""

from __future__ import annotations

import time
from typing import ClassVar

from redis import Redis
from rq import Queue

from benchmarks.harness import CONCURRENCY, ENQUEUE_BATCH, W3_SLEEP
from benchmarks.peers import recorder
from benchmarks.peers.base import PeerSide, cli


def noop() -> None:
    recorder.noop()


def stamp(i: int) -> None:
    recorder.stamp(i)


def sleep() -> None:
    recorder.started()
    time.sleep(W3_SLEEP)
    recorder.done()


FUNCS = {"noop": noop, "sleep": sleep}


class RqSide(PeerSide):
    name = "rq"
    kind = "redis"
    w1_jobs_cap: ClassVar[int | None] = 1_000
    settings: ClassVar[dict[str, str]] = {
        "worker": "rq worker (W1, forking Worker) / rq worker-pool -n 50 (W2, W3) "
        "--logging_level WARNING",
        "enqueue": "Queue.enqueue_many on a pipeline, 5,000 per call",
    }

    def setup(self) -> None:
        self.redis = Redis.from_url(self.url)
        self.queue = Queue(connection=self.redis)

    def teardown(self) -> None:
        self.redis.close()

    def worker_cmd(self, workload: str, index: int = 0) -> list[str]:
        if workload == "w1":
            return [cli("rq"), "worker", "--url", self.url, "--logging_level", "WARNING"]
        pool = [cli("rq"), "worker-pool", "-n", str(CONCURRENCY)]
        return [*pool, "--url", self.url, "--logging-level", "WARNING"]

    def enqueue_bulk(self, task: str, n: int) -> None:
        func = FUNCS[task]
        left = n
        while left:
            size = min(ENQUEUE_BATCH, left)
            with self.redis.pipeline() as pipe:
                self.queue.enqueue_many([Queue.prepare_data(func) for _ in range(size)], pipe)
                pipe.execute()
            left -= size

    def enqueue_stamp(self, i: int) -> None:
        self.queue.enqueue(stamp, i)

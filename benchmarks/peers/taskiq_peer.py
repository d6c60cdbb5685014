"""taskiq with taskiq-redis's ``RedisStreamBroker`` (the one of its brokers that
acknowledges messages, as the taskiq-redis README recommends when jobs must not be
lost). Its worker::

    taskiq worker benchmarks.peers.taskiq_peer:broker --workers 1 --max-async-tasks 50

One worker process (taskiq's default is 2), 50 async tasks at once; no result
backend. taskiq has no bulk enqueue: ``kiq()`` calls, 100 in flight at a time.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, ClassVar

from taskiq import AsyncTaskiqDecoratedTask
from taskiq_redis import RedisStreamBroker

from benchmarks.harness import CONCURRENCY, W3_SLEEP
from benchmarks.peers import recorder
from benchmarks.peers.base import PeerSide, cli, gather_in_chunks

URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")
ENQUEUE_IN_FLIGHT = 100

broker = RedisStreamBroker(URL)


@broker.task(task_name="bench.noop")
async def noop() -> None:
    recorder.noop()


@broker.task(task_name="bench.stamp")
async def stamp(i: int) -> None:
    recorder.stamp(i)


@broker.task(task_name="bench.sleep")
async def sleep() -> None:
    recorder.started()
    await asyncio.sleep(W3_SLEEP)
    recorder.done()


TASKS: dict[str, AsyncTaskiqDecoratedTask[..., Any]] = {
    "noop": noop,
    "sleep": sleep,
    "stamp": stamp,
}


class TaskiqSide(PeerSide):
    name = "taskiq"
    kind = "redis"
    stop_timeout = 5.0  # its shutdown can take 30 s+; the run is measured by then
    settings: ClassVar[dict[str, str]] = {
        "worker": "taskiq worker benchmarks.peers.taskiq_peer:broker --workers 1 "
        "--max-async-tasks 50 --log-level WARNING (RedisStreamBroker)",
        "enqueue": "task.kiq(), 100 calls in flight (no bulk API)",
    }

    def setup(self) -> None:
        # The producer's broker, on this run's store; its startup creates the
        # stream's consumer group before any message, so the worker sees them all.
        self.broker = RedisStreamBroker(self.url)
        self.tasks = {
            name: self.broker.register_task(func.original_func, task_name=func.task_name)
            for name, func in TASKS.items()
        }
        self.run(self.broker.startup())

    def teardown(self) -> None:
        self.run(self.broker.shutdown())

    def worker_cmd(self, workload: str, index: int = 0) -> list[str]:
        worker = [cli("taskiq"), "worker", "benchmarks.peers.taskiq_peer:broker", "--workers", "1"]
        return [*worker, "--max-async-tasks", str(CONCURRENCY), "--log-level", "WARNING"]

    def enqueue_bulk(self, task: str, n: int) -> None:
        kiq = self.tasks[task].kiq
        self.run(gather_in_chunks(lambda: kiq(), n, ENQUEUE_IN_FLIGHT))

    def enqueue_stamp(self, i: int) -> None:
        self.run(self.tasks["stamp"].kiq(i))

"""Dramatiq with its ``RedisBroker``. Its worker::

    dramatiq benchmarks.peers.dramatiq_peer --processes 1 --threads 8    (W1)
    dramatiq benchmarks.peers.dramatiq_peer --processes 1 --threads 50   (W2, W3)

One process (Dramatiq's default is one per CPU); W1 with its default 8 threads,
W2 and W3 with 50 (the same concurrency as everyone; Dramatiq's workers are
threads, its documented model for I/O-bound actors). Default middleware,
``max_retries=0``. Bulk enqueue: ``group(...).run()``, Dramatiq's documented way
to send many messages at once (one broker call per message underneath).
"""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from benchmarks.harness import CONCURRENCY, W3_SLEEP
from benchmarks.peers import recorder
from benchmarks.peers.base import PeerSide, cli

URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")
W1_THREADS = 8

broker = RedisBroker(url=URL)
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name="bench_noop", max_retries=0)
def noop() -> None:
    recorder.noop()


@dramatiq.actor(actor_name="bench_stamp", max_retries=0)
def stamp(i: int) -> None:
    recorder.stamp(i)


@dramatiq.actor(actor_name="bench_sleep", max_retries=0)
def sleep() -> None:
    recorder.started()
    time.sleep(W3_SLEEP)
    recorder.done()


ACTORS: dict[str, Any] = {"noop": noop, "sleep": sleep, "stamp": stamp}


class DramatiqSide(PeerSide):
    name = "dramatiq"
    kind = "redis"
    settings: ClassVar[dict[str, str]] = {
        "worker": "dramatiq benchmarks.peers.dramatiq_peer --processes 1 "
        "--threads 8 (W1) / 50 (W2, W3)",
        "enqueue": "group([actor.message() ...]).run()",
    }

    def setup(self) -> None:
        # The actors are bound to the module's broker; point it at this run's store.
        self.broker = RedisBroker(url=self.url)
        for actor in ACTORS.values():
            actor.broker = self.broker
            self.broker.declare_actor(actor)
        dramatiq.set_broker(self.broker)

    def teardown(self) -> None:
        self.broker.close()

    def worker_cmd(self, workload: str, index: int = 0) -> list[str]:
        threads = W1_THREADS if workload == "w1" else CONCURRENCY
        module = "benchmarks.peers.dramatiq_peer"
        return [cli("dramatiq"), module, "--processes", "1", "--threads", str(threads)]

    def enqueue_bulk(self, task: str, n: int) -> None:
        actor = ACTORS[task]
        dramatiq.group([actor.message() for _ in range(n)], broker=self.broker).run()

    def enqueue_stamp(self, i: int) -> None:
        stamp.send(i)

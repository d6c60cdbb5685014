"""Dramatiq with its ``RabbitmqBroker``. Its worker::

    dramatiq benchmarks.peers.dramatiq_rabbitmq_peer --processes 1 --threads 8    (W1)
    dramatiq benchmarks.peers.dramatiq_rabbitmq_peer --processes 1 --threads 50   (W2, W3)

As :mod:`benchmarks.peers.dramatiq_peer` on Redis, with the broker Dramatiq's
docs put first: ``RabbitmqBroker(url=...)``, its defaults (no publisher
confirms), default middleware, ``max_retries=0``. Bulk enqueue:
``group(...).run()``.
"""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from benchmarks.harness import CONCURRENCY, W3_SLEEP
from benchmarks.peers import recorder
from benchmarks.peers.base import PeerSide, cli

URL = os.environ.get("BENCH_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
W1_THREADS = 8
MODULE = "benchmarks.peers.dramatiq_rabbitmq_peer"

broker = RabbitmqBroker(url=URL)
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


class DramatiqRabbitSide(PeerSide):
    name = "dramatiq"
    kind = "rabbitmq"
    settings: ClassVar[dict[str, str]] = {
        "worker": f"dramatiq {MODULE} --processes 1 --threads 8 (W1) / 50 (W2, W3)",
        "enqueue": "group([actor.message() ...]).run()",
    }

    def setup(self) -> None:
        # The actors are bound to the module's broker; point it at this run's vhost.
        self.broker = RabbitmqBroker(url=self.url)
        for actor in ACTORS.values():
            actor.broker = self.broker
            self.broker.declare_actor(actor)
        dramatiq.set_broker(self.broker)

    def teardown(self) -> None:
        self.broker.close()

    def worker_cmd(self, workload: str, index: int = 0) -> list[str]:
        threads = W1_THREADS if workload == "w1" else CONCURRENCY
        return [cli("dramatiq"), MODULE, "--processes", "1", "--threads", str(threads)]

    def enqueue_bulk(self, task: str, n: int) -> None:
        actor = ACTORS[task]
        dramatiq.group([actor.message() for _ in range(n)], broker=self.broker).run()

    def enqueue_stamp(self, i: int) -> None:
        stamp.send(i)

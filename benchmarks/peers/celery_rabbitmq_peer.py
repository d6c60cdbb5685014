"""Celery on RabbitMQ, its default broker. Its worker::

    celery -A benchmarks.peers.celery_peer worker -l WARNING            (W1)
    celery -A benchmarks.peers.celery_peer worker -c 50 -l WARNING      (W2, W3)

The app, the tasks and the producer are those of :mod:`benchmarks.peers.celery_peer`
(the broker URL comes from ``BENCH_URL``: here an ``amqp://`` vhost of the run's
own). The pool is Celery's default, prefork: in W1 with its default concurrency
(one child per CPU) and the prefetch multiplier 64 of its optimizing guide, in
W2 and W3 with 50 children, the concurrency everyone gets.
"""

from __future__ import annotations

from typing import ClassVar

from benchmarks.harness import CONCURRENCY
from benchmarks.peers.base import cli
from benchmarks.peers.celery_peer import CelerySide


class CeleryRabbitSide(CelerySide):
    kind = "rabbitmq"
    settings: ClassVar[dict[str, str]] = {
        "worker": "celery -A benchmarks.peers.celery_peer worker -l WARNING: prefork, its "
        "default concurrency (CPUs) and prefetch multiplier 64 in W1; -c 50 in W2/W3",
        "enqueue": "send_task (apply_async by name) in a loop over one producer",
    }

    def worker_cmd(self, workload: str, index: int = 0) -> list[str]:
        app = ["-A", "benchmarks.peers.celery_peer", "worker", "-n", f"bench{index}@%h"]
        concurrency = [] if workload == "w1" else ["-c", str(CONCURRENCY)]
        return [cli("celery"), *app, *concurrency, "-l", "WARNING"]

"""Celery with the Redis transport. Its worker::

    celery -A benchmarks.peers.celery_peer worker --pool threads -c 50 -l WARNING

One worker process with the ``threads`` pool at 50 (Celery's documented pools for
I/O-bound work are gevent/eventlet, which need monkey-patching, or threads);
``worker_prefetch_multiplier`` 64 in W1 (its optimizing guide's advice for many
short tasks), its default 4 in W2 and W3. No result backend
(``task_ignore_result``). Bulk enqueue: ``send_task`` (``apply_async`` by name) in
a loop over one producer (``app.producer_or_acquire()``), Celery's way of sending
many messages on one connection; a ``group`` sends one message per task the same way.
"""

from __future__ import annotations

import os
import time
from typing import ClassVar

from celery import Celery

from benchmarks.harness import CONCURRENCY, W3_SLEEP
from benchmarks.peers import recorder
from benchmarks.peers.base import PeerSide, cli

URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")


# Celery's optimizing guide: for lots of short tasks where throughput matters, a
# large prefetch multiplier ("say 64, or 128"); its default 4 elsewhere.
W1_PREFETCH_MULTIPLIER = 64


def build(url: str) -> Celery:
    app = Celery("bench", broker=url)
    app.conf.update(
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    if os.environ.get("BENCH_WORKLOAD") == "w1":
        app.conf.worker_prefetch_multiplier = W1_PREFETCH_MULTIPLIER
    return app


app = build(URL)


@app.task(name="bench.noop")
def noop() -> None:
    recorder.noop()


@app.task(name="bench.stamp")
def stamp(i: int) -> None:
    recorder.stamp(i)


@app.task(name="bench.sleep")
def sleep() -> None:
    recorder.started()
    time.sleep(W3_SLEEP)
    recorder.done()


class CelerySide(PeerSide):
    name = "celery"
    kind = "redis"
    settings: ClassVar[dict[str, str]] = {
        "worker": "celery -A benchmarks.peers.celery_peer worker --pool threads -c 50 "
        "-l WARNING (prefetch multiplier 64 in W1, 4 otherwise; results ignored)",
        "enqueue": "send_task (apply_async by name) in a loop over one producer",
    }

    def setup(self) -> None:
        self.app = build(self.url)

    def teardown(self) -> None:
        self.app.close()

    def worker_cmd(self, workload: str, index: int = 0) -> list[str]:
        app = ["-A", "benchmarks.peers.celery_peer", "worker", "-n", f"bench{index}@%h"]
        return [cli("celery"), *app, "--pool", "threads", "-c", str(CONCURRENCY), "-l", "WARNING"]

    def enqueue_bulk(self, task: str, n: int) -> None:
        name = f"bench.{task}"
        with self.app.producer_or_acquire() as producer:
            for _ in range(n):
                self.app.send_task(name, producer=producer)

    def enqueue_stamp(self, i: int) -> None:
        self.app.send_task("bench.stamp", args=(i,))

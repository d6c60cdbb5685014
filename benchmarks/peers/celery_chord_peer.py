"""Celery's chord on Redis with its Redis result backend, for benchmarks/workflows.py.

Its worker, a real process started before the chord is sent::

    celery -A benchmarks.peers.celery_chord_peer worker -n chord@%h -l WARNING

Celery's default pool (prefork) at its default concurrency (one child process per
CPU), ``worker_prefetch_multiplier`` 64 (its optimizing guide's advice for many
short tasks, as in run.py's W1), results kept (a chord needs them) in the Redis
result backend on the same ``redis-server`` as the broker. The chord is
``chord(group of N bench.noop)(bench.chord_callback.s())``: Celery's Redis
backend counts the members' results in Redis and the member that completes the
count sends the callback.

Sending is most of Celery's end to end: with a result backend, ``apply_async``
subscribes the producer to each task's result channel as it sends it
(``backend.on_task_call``), a round trip per member. At the benchmark's exit,
Celery's result handles may print an ``ImportError`` from ``AsyncResult.__del__``
("Python is likely shutting down"): after the measurement, harmless.

What the record file says (:mod:`benchmarks.peers.recorder`): each member's
``d`` line (its handler's end), stamp 0 when the callback's handler starts, stamp
1 when it ends (stamp -1 is the warm-up job).
"""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

from celery import Celery, chord, group

from benchmarks.harness import running_all
from benchmarks.peers import recorder
from benchmarks.peers.base import PeerSide, cli

URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")
PREFETCH_MULTIPLIER = 64
CALLBACK_STARTED, CALLBACK_DONE, WARM_UP = 0, 1, -1


def build(url: str) -> Celery:
    app = Celery("bench_chord", broker=url, backend=url)
    app.conf.update(
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_prefetch_multiplier=PREFETCH_MULTIPLIER,
        result_expires=None,  # no periodic cleanup task in the way
    )
    return app


app = build(URL)


@app.task(name="bench.noop")
def noop() -> None:
    recorder.noop()


@app.task(name="bench.stamp")
def stamp(i: int) -> None:
    recorder.stamp(i)


@app.task(name="bench.chord_callback")
def chord_callback(results: list[Any]) -> int:
    recorder.stamp(CALLBACK_STARTED)
    count = len(results)
    recorder.stamp(CALLBACK_DONE)
    return count


class CeleryChordSide(PeerSide):
    name = "celery"
    kind = "redis"
    stop_timeout = 60.0
    settings: ClassVar[dict[str, str]] = {
        "worker": "celery -A benchmarks.peers.celery_chord_peer worker -l WARNING "
        "(prefork, one child per CPU; prefetch multiplier 64; Redis result backend)",
        "chord": "chord(group(noop.s() x N))(chord_callback.s()), sent once the worker "
        "has run a warm-up task",
    }

    def setup(self) -> None:
        self.app = build(self.url)

    def teardown(self) -> None:
        self.app.close()

    def worker_cmd(self, workload: str, index: int = 0) -> list[str]:
        return [
            cli("celery"),
            *("-A", "benchmarks.peers.celery_chord_peer", "worker", "-n", f"chord{index}@%h"),
            *("-l", "WARNING"),
        ]

    def chord(self, n: int) -> dict[str, float]:
        """A chord of ``n`` no-op members: the callback's delay after the last
        member's end, the members' drain, and the time from sending to the
        callback's end."""
        procs, record = self.start_workers("chord")
        with running_all(procs):
            self.app.send_task("bench.stamp", args=(WARM_UP,))
            self.wait_for("the warm-up task", record, procs, lambda r: WARM_UP in r.stamps)
            sent_at = time.time()
            members = group([self.app.signature("bench.noop") for _ in range(n)])
            chord(members)(self.app.signature("bench.chord_callback"))
            sent_s = time.time() - sent_at
            self.wait_for("the callback", record, procs, lambda r: CALLBACK_DONE in r.stamps)
        if record.done != n:
            raise RuntimeError(f"celery ran {record.done} of {n} chord members")
        return {
            "members": float(n),
            "send_s": sent_s,
            "callback_delay_ms": (record.stamps[CALLBACK_STARTED] - record.last_done) * 1000,
            "members_drain_per_s": n / record.window(),
            "end_to_end_s": record.stamps[CALLBACK_DONE] - sent_at,
        }

"""Huey on SQLite, the SQLite run's peer: ``SqliteHuey`` and its own consumer.

Huey keeps no per-task timestamps, so its consumer records them itself through
Huey's signals (benchmarks/apps/huey_app.py) and writes them to a file when the
expected count is reached.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    CONCURRENCY,
    IDLE_SECONDS,
    PY,
    W2_INTERVAL,
    W2_JOBS,
    W3_JOBS,
    BenchError,
    Proc,
    base_env,
    latency_stats,
    running,
    w3_stats,
    wait_until,
)

HUEY_APP = "benchmarks.apps.huey_app.huey"
# Huey: its consumer with thread workers (the documented choice for I/O-bound
# tasks without gevent). W1 uses the worker count that drained fastest here
# (see README); W2 and W3 use the same concurrency as conveyor.
HUEY_W1_WORKERS = 1
HUEY_WORKERS = CONCURRENCY


class HueySide:
    name = "huey"
    w1_workers = HUEY_W1_WORKERS

    def __init__(
        self, workdir: Path, url: str | None = None, server_cpu: Callable[[], Any] | None = None
    ) -> None:
        from benchmarks.apps.huey_app import build

        self.workdir = workdir
        self.db = workdir / "huey.db"
        self.huey, self.tasks = build(str(self.db))

    def close(self) -> None:
        self.huey.storage.close()

    def start_consumer(self, workers: int, expect: int = 0) -> tuple[Proc, Path]:
        done = self.workdir / f"huey-done-{time.monotonic_ns()}.json"
        env = base_env(self.workdir)
        env.update(BENCH_HUEY_DB=str(self.db), BENCH_HUEY_DONE=str(done), BENCH_EXPECT=str(expect))
        cmd = [PY, "-m", "huey.bin.huey_consumer", HUEY_APP, "-k", "thread"]
        cmd += ["-w", str(workers), "-q"]
        proc = Proc.start("huey consumer", cmd, env, self.workdir / "consumer.log", signal.SIGINT)
        return proc, done

    def enqueue_bulk(self, task: str, n: int) -> float:
        """Huey has no bulk enqueue: ``Task.map`` (a loop of enqueues) is its fastest way."""
        t0 = time.perf_counter()
        self.tasks[task].map([()] * n)
        return time.perf_counter() - t0

    @staticmethod
    def read_done(done: Path, proc: Proc) -> dict[str, Any]:
        wait_until(f"{done.name}", done.exists, proc)
        data: dict[str, Any] = json.loads(done.read_text())
        if data["errors"]:
            raise BenchError(f"{data['errors']} Huey task(s) failed:\n{proc.tail()}")
        return data

    def w1(self, n: int) -> dict[str, float]:
        enqueue_s = self.enqueue_bulk("noop", n)
        proc, done = self.start_consumer(self.w1_workers, expect=n)
        with running(proc):
            data = self.read_done(done, proc)
            seen = time.time()
        return {
            "enqueue_per_s": n / enqueue_s,
            "drain_per_s": n / (data["last_done"] - data["first_start"]),
            "drain_from_spawn_per_s": n / (seen - proc.started),
        }

    def w2(self) -> dict[str, float]:
        proc, _ = self.start_consumer(HUEY_WORKERS)
        with running(proc):
            self.tasks["stamp"](-1).get(blocking=True, timeout=120)  # ready
            time.sleep(IDLE_SECONDS)
            sent: list[tuple[Any, float]] = []
            t0 = time.perf_counter()
            for i in range(W2_JOBS):
                pause = t0 + i * W2_INTERVAL - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                at = time.time()
                sent.append((self.tasks["stamp"](i), at))
            latencies = []
            for result, at in sent:
                started = result.get(blocking=True, timeout=120)
                latencies.append(started - at)
        return latency_stats(latencies, W2_JOBS)

    def w3(self) -> dict[str, float]:
        self.enqueue_bulk("sleep", W3_JOBS)
        proc, done = self.start_consumer(HUEY_WORKERS, expect=W3_JOBS)
        with running(proc):
            data = self.read_done(done, proc)
        return w3_stats(data["last_done"] - data["first_start"])

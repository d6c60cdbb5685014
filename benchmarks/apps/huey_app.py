"""The Huey side of the benchmarks: ``SqliteHuey`` with its default (documented)
settings, the same three tasks, and signal hooks that time the run.

The consumer loads it as ``benchmarks.apps.huey_app.huey``::

    python -m huey.bin.huey_consumer benchmarks.apps.huey_app.huey -k thread -w 50 -q

``BENCH_HUEY_DB`` names the SQLite file. Huey keeps no start/finish time per
task, so the consumer records them itself through Huey's signals: when
``BENCH_EXPECT`` tasks have completed it writes ``BENCH_HUEY_DONE`` (JSON:
count, first start, last completion, all as ``time.time()``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from huey import SqliteHuey
from huey.signals import SIGNAL_COMPLETE, SIGNAL_ERROR, SIGNAL_EXECUTING


def build(filename: str) -> tuple[SqliteHuey, dict[str, Any]]:
    """A Huey instance on ``filename`` and its tasks by name (the producer calls this too)."""
    huey = SqliteHuey("bench", filename=filename)

    @huey.task(name="bench.noop")
    def noop() -> None:
        return None

    @huey.task(name="bench.stamp")
    def stamp(i: int) -> float:
        return time.time()

    @huey.task(name="bench.sleep")
    def sleep() -> None:
        time.sleep(0.05)

    return huey, {"noop": noop, "stamp": stamp, "sleep": sleep}


class _Recorder:
    """First start and last completion of the run, written out once ``expect`` are done."""

    def __init__(self, expect: int, out: str) -> None:
        self.expect = expect
        self.out = out
        self.lock = threading.Lock()
        self.first_start: float | None = None
        self.last_done = 0.0
        self.done = 0
        self.errors = 0

    def executing(self, signal: str, task: Any, *args: Any) -> None:
        now = time.time()
        with self.lock:
            if self.first_start is None:
                self.first_start = now

    def complete(self, signal: str, task: Any, *args: Any) -> None:
        now = time.time()
        with self.lock:
            if signal == SIGNAL_ERROR:
                self.errors += 1
            self.done += 1
            self.last_done = now
            if self.done == self.expect:
                self._write()

    def _write(self) -> None:
        tmp = self.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(
                {
                    "done": self.done,
                    "errors": self.errors,
                    "first_start": self.first_start,
                    "last_done": self.last_done,
                },
                f,
            )
        os.replace(tmp, self.out)


huey, tasks = build(os.environ.get("BENCH_HUEY_DB", "huey-bench.db"))

if os.environ.get("BENCH_HUEY_DONE"):
    _recorder = _Recorder(int(os.environ.get("BENCH_EXPECT", "0")), os.environ["BENCH_HUEY_DONE"])
    huey.signal(SIGNAL_EXECUTING)(_recorder.executing)
    huey.signal(SIGNAL_COMPLETE, SIGNAL_ERROR)(_recorder.complete)

"""Fair queues: what fairness costs a drain, and what it buys a small tenant.

For each store (SQLite file, PostgreSQL database, Redis on its own
redis-server), two measurements, medians of ``--repeat``:

- **drain**: ``--jobs`` no-op jobs over ``--tenants`` tenants (enqueued in
  turn), drained by one in-process burst worker at concurrency 50, once on a
  queue with ``fairness="tenant"`` and once on the same queue plain. Prints both
  drain rates and their ratio, fair/plain (target >= 0.85).
- **pickup**: a worker at concurrency 20 runs; tenant A has ``--backlog``
  jobs of ``--a-ms`` ms waiting on a fair queue while tenant B enqueues 100
  no-op jobs 10 ms apart. Prints B's pickup p99 (enqueue to handler start) with
  A's backlog and with none, and their ratio (target <= 2).

The fair and plain drains of a repetition run in turns (which goes first
alternates), so a change in the machine's load weighs on both.

    .venv/bin/python benchmarks/fair_queues.py --stores postgres --repeat 3

Run by hand, never as part of the test gate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.flow_control import fresh_url
from benchmarks.harness import percentile
from benchmarks.stores import RedisStore
from conveyor import Conveyor, JobContext

QUEUE = "default"
B_JOBS = 100
B_GAP = 0.01


class Pickups:
    """B's pickup delays, and an event set once all of B's jobs ran."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.all_ran = asyncio.Event()


def build_app(url: str, fair: bool, pickups: Pickups) -> Conveyor:
    app = Conveyor(url, circuit_threshold=0)
    if fair:
        app.queue(QUEUE, fairness="tenant")

    @app.task("noop")
    async def noop(ctx: JobContext) -> None:
        return None

    @app.task("work")
    async def work(ctx: JobContext, seconds: float) -> None:
        await asyncio.sleep(seconds)

    @app.task("probe")
    async def probe(ctx: JobContext, sent: float) -> None:
        pickups.delays.append(time.time() - sent)
        if len(pickups.delays) >= B_JOBS:
            pickups.all_ran.set()

    return app


async def drain_rate(url: str, fair: bool, jobs: int, tenants: int) -> float:
    app = build_app(url, fair, Pickups())
    try:
        items: list[Any] = [("noop", None, {"tenant": f"t{i % tenants:03d}"}) for i in range(jobs)]
        for start in range(0, jobs, 1000):
            await app.enqueue_many(items[start : start + 1000])
        began = time.perf_counter()
        done = await app.drain(concurrency=50)
        elapsed = time.perf_counter() - began
        if done != jobs:
            raise RuntimeError(f"drained {done} of {jobs}")
        return jobs / elapsed
    finally:
        await app.close()


async def pickup_p99(url: str, backlog: int, a_seconds: float) -> tuple[float, int]:
    """B's pickup p99 in seconds, and how many of A's jobs were still waiting
    when B's last job ran (the backlog must outlast B)."""
    pickups = Pickups()
    app = build_app(url, True, pickups)
    try:
        items: list[Any] = [("work", {"seconds": a_seconds}, {"tenant": "A"})] * backlog
        for start in range(0, backlog, 5000):
            await app.enqueue_many(items[start : start + 5000])
        worker = app.worker(concurrency=20, install_signals=False)
        running = asyncio.create_task(worker.run())
        await asyncio.sleep(0.5)  # the worker is up and, with a backlog, busy
        for _ in range(B_JOBS):
            await app.enqueue("probe", {"sent": time.time()}, tenant="B")
            await asyncio.sleep(B_GAP)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pickups.all_ran.wait(), 60)
        left = await app.count_jobs(state="waiting") if backlog else 0
        worker.stop()
        await running
        if len(pickups.delays) < B_JOBS:
            raise RuntimeError(f"only {len(pickups.delays)} of B's {B_JOBS} jobs ran")
        return percentile(pickups.delays, 99), left
    finally:
        await app.close()


def measure(store: str, args: argparse.Namespace) -> None:
    fair: list[float] = []
    plain: list[float] = []
    loaded: list[float] = []
    idle: list[float] = []
    left: list[int] = []
    redis = RedisStore() if store == "redis" else None
    try:
        for repetition in range(args.repeat):
            for is_fair in (True, False) if repetition % 2 == 0 else (False, True):
                with fresh_url(store, f"drain{is_fair}{repetition}", redis) as url:
                    rate = asyncio.run(drain_rate(url, is_fair, args.jobs, args.tenants))
                    (fair if is_fair else plain).append(rate)
            a_seconds = args.a_ms / 1000
            with fresh_url(store, f"backlog{repetition}", redis) as url:
                p99, waiting = asyncio.run(pickup_p99(url, args.backlog, a_seconds))
                loaded.append(p99)
                left.append(waiting)
            with fresh_url(store, f"idle{repetition}", redis) as url:
                idle.append(asyncio.run(pickup_p99(url, 0, a_seconds))[0])
    finally:
        if redis is not None:
            redis.close()
    drains = [f / p for f, p in zip(fair, plain, strict=True)]
    pickups = [b / i for b, i in zip(loaded, idle, strict=True)]
    print(
        f"{store:8} drain fair {statistics.median(fair):8,.0f}/s  plain "
        f"{statistics.median(plain):8,.0f}/s  ratio {statistics.median(drains):.2f} "
        f"(each: {', '.join(f'{r:.2f}' for r in drains)})"
    )
    print(
        f"{store:8} B pickup p99 with A's backlog {statistics.median(loaded) * 1000:7.1f} ms  "
        f"without {statistics.median(idle) * 1000:7.1f} ms  ratio "
        f"{statistics.median(pickups):.2f} (each: {', '.join(f'{r:.2f}' for r in pickups)}; "
        f"A still waiting at the end: {left})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--backlog", type=int, default=50_000)
    parser.add_argument("--a-ms", type=float, default=10.0, help="each of A's jobs, ms")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,postgres,redis")
    args = parser.parse_args()
    print(
        f"drain: {args.jobs} no-op jobs over {args.tenants} tenants at -c 50, fair vs plain; "
        f"pickup: A {args.backlog} waiting ({args.a_ms:g} ms each), "
        f"B {B_JOBS} jobs {B_GAP * 1000:.0f} ms apart "
        f"at -c 20; medians of {args.repeat}"
    )
    for store in args.stores.split(","):
        measure(store, args)


if __name__ == "__main__":
    main()

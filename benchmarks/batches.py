"""Batch handlers vs single jobs: the same no-op work drained both ways.

For each store (SQLite, Redis on its own redis-server, a fresh PostgreSQL
database per run), ``--jobs`` no-op jobs
are enqueued, then drained by an in-process burst worker: once as single jobs,
once as a batch task (``batch_size``). Prints jobs/s for both and the ratio,
medians of ``--repeat``. Issue 17's target: the batch drain >= 2x the single one.

    .venv/bin/python benchmarks/batches.py --jobs 10000 --batch-size 100 --repeat 3

Run by hand, never as part of the test gate.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.stores import PostgresStore, RedisStore, Store
from conveyor import BatchContext, Conveyor, JobContext
from conveyor.job import Job


def build_app(url: str, batch_size: int) -> Conveyor:
    app = Conveyor(url, circuit_threshold=0)

    @app.task("noop")
    async def noop(ctx: JobContext) -> None:
        return None

    @app.task("noop.batch", batch_size=batch_size)
    async def noop_batch(ctx: BatchContext, jobs: list[Job]) -> list[Any]:
        return [None] * len(jobs)

    return app


async def drain_rate(url: str, task: str, jobs: int, batch_size: int) -> float:
    """Jobs per second of a burst worker draining ``jobs`` enqueued jobs of ``task``."""
    app = build_app(url, batch_size)
    try:
        for start in range(0, jobs, 1000):
            count = min(1000, jobs - start)
            await app.enqueue_many([(task, None)] * count)
        began = time.perf_counter()
        done = await app.drain()
        elapsed = time.perf_counter() - began
        if done != jobs:
            raise RuntimeError(f"{task}: drained {done} of {jobs}")
        return jobs / elapsed
    finally:
        await app.close()


def measure(store: str, args: argparse.Namespace) -> tuple[float, float, list[float]]:
    """Medians of the single and the batched drain, and each repetition's ratio.
    (The servers' helpers run their own event loops: outside any drain's.)"""
    singles: list[float] = []
    batches: list[float] = []
    server: Store | None = None
    if store == "redis":
        server = RedisStore()
    elif store == "postgres":
        server = PostgresStore(args.pg_admin_url)
    try:
        for repetition in range(args.repeat):
            for task, rates in (("noop", singles), ("noop.batch", batches)):
                if server is not None:
                    with server.fresh(task) as url:
                        assert url is not None
                        rates.append(asyncio.run(drain_rate(url, task, args.jobs, args.batch_size)))
                else:
                    with tempfile.TemporaryDirectory() as tmp:
                        url = f"sqlite:///{tmp}/{task}-{repetition}.db"
                        rates.append(asyncio.run(drain_rate(url, task, args.jobs, args.batch_size)))
    finally:
        if server is not None:
            server.close()
    ratios = [b / s for s, b in zip(singles, batches, strict=True)]
    return statistics.median(singles), statistics.median(batches), ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,redis,postgres")
    parser.add_argument(
        "--pg-admin-url",
        default="postgresql://root@127.0.0.1:5432/postgres",
        help="a server where the benchmark may create (and drop) a database per run",
    )
    args = parser.parse_args()
    print(f"{args.jobs} no-op jobs, batch_size={args.batch_size}, median of {args.repeat}")
    print(f"{'store':8} {'single jobs/s':>14} {'batched jobs/s':>15} {'ratio':>6}  per run")
    for store in args.stores.split(","):
        single, batched, ratios = measure(store, args)
        runs = ", ".join(f"{r:.2f}" for r in ratios)
        median = statistics.median(ratios)
        print(f"{store:8} {single:14,.0f} {batched:15,.0f} {median:5.2f}x  ({runs})")


if __name__ == "__main__":
    main()

"""Fair queues: what ``fairness="tenant"`` costs, and what it buys a small tenant.

For each store (SQLite file, PostgreSQL database, Redis on its own
redis-server), two measurements, medians of ``--repeat``, fair and plain runs
alternated within each repetition:

- **drain**: ``--jobs`` no-op jobs over ``--tenants`` tenants enqueued, then
  drained by one in-process burst worker; the same jobs on the same queue
  with and without ``fairness="tenant"``. Prints both drain rates and their
  ratio (target >= 0.85).
- **pickup**: a worker runs (concurrency 10) while tenant B enqueues 100
  no-op jobs 10 ms apart, once with tenant A holding ``--backlog`` waiting
  no-op jobs of its own on the same fair queue, once without. Pickup is the
  time from just before ``enqueue`` to the handler's start (one process, one
  clock). Prints B's p99 both ways and their ratio (target <= 2).

    .venv/bin/python benchmarks/fair_queues.py --stores redis --repeat 3

Run by hand, never as part of the test gate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.stores import PostgresStore, RedisStore
from conveyor import Conveyor, JobContext

PG_ADMIN = "postgresql://root@127.0.0.1:5432/test"
QUEUE = "default"
B_JOBS = 100
B_GAP = 0.01


def build_app(url: str, fair: bool, started: dict[str, float] | None = None) -> Conveyor:
    app = Conveyor(url, circuit_threshold=0)
    if fair:
        app.queue(QUEUE, fairness="tenant")

    @app.task("noop")
    async def noop(ctx: JobContext) -> None:
        if started is not None and ctx.job.tenant == "B":
            started[ctx.job.id] = time.perf_counter()

    return app


async def enqueue_spread(app: Conveyor, jobs: int, tenants: int) -> None:
    items: list[Any] = [("noop", None, {"tenant": f"t{i % tenants:03d}"}) for i in range(jobs)]
    for start in range(0, jobs, 1000):
        await app.enqueue_many(items[start : start + 1000])


async def drain_rate(
    url: str, fair: bool, jobs: int, tenants: int, cpu: Callable[[], float | None]
) -> tuple[float, float | None]:
    """Jobs/s of the drain, and the store server's CPU ms per 1,000 jobs (Redis)."""
    app = build_app(url, fair)
    try:
        await enqueue_spread(app, jobs, tenants)
        cpu_before = cpu()
        began = time.perf_counter()
        done = await app.drain()
        elapsed = time.perf_counter() - began
        cpu_after = cpu()
        if done != jobs:
            raise RuntimeError(f"drained {done} of {jobs}")
        spent = None
        if cpu_before is not None and cpu_after is not None:
            spent = (cpu_after - cpu_before) * 1e6 / jobs
        return jobs / elapsed, spent
    finally:
        await app.close()


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


async def pickup_p99(url: str, backlog: int) -> tuple[float, int]:
    """B's pickup p99 in ms, and how many of A's jobs were still waiting at the end."""
    started: dict[str, float] = {}
    app = build_app(url, True, started)
    try:
        if backlog:
            items: list[Any] = [("noop", None, {"tenant": "A"})] * backlog
            for start in range(0, backlog, 1000):
                await app.enqueue_many(items[start : start + 1000])
        worker = app.worker(concurrency=10, install_signals=False)
        running = asyncio.create_task(worker.run())
        sent: dict[str, float] = {}
        for _ in range(B_JOBS):
            before = time.perf_counter()
            sent[(await app.enqueue("noop", tenant="B")).id] = before
            await asyncio.sleep(B_GAP)
        for job_id in sent:
            await app.wait_for_job(job_id, timeout=60)
        left = await app.count_jobs(state="waiting", tenant="A") if backlog else 0
        worker.stop()
        await running
        return p99([(started[i] - sent[i]) * 1000 for i in sent]), left
    finally:
        await app.close()


@contextlib.contextmanager
def fresh_url(store: str, label: str, redis: RedisStore | None) -> Iterator[str]:
    if store == "redis":
        assert redis is not None
        with redis.fresh(label) as url:
            assert url is not None
            yield url
    elif store == "postgres":
        pg = PostgresStore(PG_ADMIN)
        with pg.fresh(label) as url:
            assert url is not None
            yield url
    else:
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/{label}.db"


def measure(store: str, args: argparse.Namespace) -> None:
    fair: list[float] = []
    plain: list[float] = []
    cpu: dict[bool, list[float]] = {True: [], False: []}
    loaded: list[float] = []
    alone: list[float] = []
    left: list[int] = []
    redis = RedisStore() if store == "redis" else None
    try:
        server_cpu = redis.cpu_seconds if redis is not None else lambda: None
        for repetition in range(args.repeat):
            # Alternate which goes first: a noisy moment should not favour one.
            for is_fair in (False, True) if repetition % 2 == 0 else (True, False):
                with fresh_url(store, f"drain{repetition}{is_fair}", redis) as url:
                    rate, spent = asyncio.run(
                        drain_rate(url, is_fair, args.jobs, args.tenants, server_cpu)
                    )
                (fair if is_fair else plain).append(rate)
                if spent is not None:
                    cpu[is_fair].append(spent)
            with fresh_url(store, f"alone{repetition}", redis) as url:
                alone.append(asyncio.run(pickup_p99(url, 0))[0])
            with fresh_url(store, f"backlog{repetition}", redis) as url:
                p, n = asyncio.run(pickup_p99(url, args.backlog))
                loaded.append(p)
                left.append(n)
    finally:
        if redis is not None:
            redis.close()
    ratios = [f / p for f, p in zip(fair, plain, strict=True)]
    print(
        f"{store:8} drain fair {statistics.median(fair):8,.0f}/s  plain "
        f"{statistics.median(plain):8,.0f}/s  ratio {statistics.median(ratios):.2f} "
        f"(each: {', '.join(f'{r:.2f}' for r in ratios)})"
    )
    if cpu[True] and cpu[False]:
        print(
            f"{store:8} drain server CPU per 1k jobs: fair {statistics.median(cpu[True]):.1f} ms, "
            f"plain {statistics.median(cpu[False]):.1f} ms"
        )
    pickup_ratios = [b / a for b, a in zip(loaded, alone, strict=True)]
    print(
        f"{store:8} B pickup p99 with A's backlog {statistics.median(loaded):.2f} ms, "
        f"without {statistics.median(alone):.2f} ms, ratio "
        f"{statistics.median(pickup_ratios):.2f} "
        f"(each: {', '.join(f'{r:.2f}' for r in pickup_ratios)}; "
        f"A's jobs still waiting at the end: {left})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--backlog", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,postgres,redis")
    args = parser.parse_args()
    print(
        f"drain: {args.jobs} no-op jobs over {args.tenants} tenants, fair vs plain; "
        f"pickup: tenant B {B_JOBS} jobs {B_GAP * 1000:.0f} ms apart, tenant A "
        f"{args.backlog} waiting vs none; medians of {args.repeat}"
    )
    for store in args.stores.split(","):
        measure(store, args)


if __name__ == "__main__":
    main()

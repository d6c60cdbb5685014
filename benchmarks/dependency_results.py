"""A chord callback's read of 10,000 dependency results: all at once
(``ctx.dependency_results()``) against a page at a time
(``ctx.iter_dependency_results(page_size)``).

For each store (memory, a SQLite file, Redis on the benchmark's own
``redis-server``, a fresh PostgreSQL database), ``--members`` jobs that each
returned a ``--result-bytes`` string are completed (a group, drained in
process), then one job that depends on all of them is read the way its handler
would: through a ``JobContext`` on the store's ``get_jobs``. Peak memory is
tracemalloc's peak of the Python heap during the read (results consumed one
by one, nothing kept); time is the read alone without tracemalloc. Medians of
``--repeat``.

    .venv/bin/python benchmarks/dependency_results.py --members 10000 --repeat 3

Run by hand, never as part of the test gate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.stores import PostgresStore, RedisStore, Store
from conveyor import Conveyor, JobContext, group
from conveyor.context import DEPENDENCY_PAGE_SIZE

Read = Callable[[JobContext], Awaitable[int]]


async def read_whole(ctx: JobContext) -> int:
    return sum(len(result) for result in await ctx.dependency_results())


def read_paged(page_size: int) -> Read:
    async def read(ctx: JobContext) -> int:
        total = 0
        async for result in ctx.iter_dependency_results(page_size=page_size):
            total += len(result)
        return total

    return read


async def measure(url: str, args: argparse.Namespace) -> dict[str, float]:
    app = Conveyor(url, circuit_threshold=0)
    value = "x" * args.result_bytes

    @app.task("member")
    async def member(ctx: JobContext) -> str:
        return value

    @app.task("callback")
    async def callback(ctx: JobContext) -> None:
        return None

    try:
        workflow = await app.start(group(*(app.step("member") for _ in range(args.members))))
        if await app.drain(queues=["default"], concurrency=50) != args.members:
            raise RuntimeError("not every member ran")
        backend = await app.connect()
        waiting = await app.enqueue("callback", depends_on=[job.id for job in workflow.jobs])
        ctx = JobContext(waiting, "bench", read_jobs=backend.get_jobs)
        out: dict[str, float] = {}
        for name, read in (("whole", read_whole), ("paged", read_paged(args.page_size))):
            started = time.perf_counter()
            total = await read(ctx)
            out[f"{name}_s"] = time.perf_counter() - started
            if total != args.members * args.result_bytes:
                raise RuntimeError(f"{name}: read {total} bytes of results")
            tracemalloc.start()
            await read(ctx)
            out[f"{name}_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
        return out
    finally:
        await app.close()


def run(kind: str, store: Store, args: argparse.Namespace) -> dict[str, float]:
    if kind == "memory":
        return asyncio.run(measure("memory://", args))
    with store.fresh("depresults") as url:
        if url is not None:
            return asyncio.run(measure(url, args))
    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(measure(f"sqlite:///{tmp}/deps.db", args))


def make_store(kind: str) -> Store:
    if kind == "redis":
        return RedisStore()
    if kind == "postgres":
        admin = os.environ.get(
            "CONVEYOR_BENCH_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/postgres"
        )
        return PostgresStore(admin)
    return Store()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--result-bytes", type=int, default=1_000)
    parser.add_argument("--page-size", type=int, default=DEPENDENCY_PAGE_SIZE)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="memory,sqlite,redis,postgres")
    args = parser.parse_args()
    print(
        f"{args.members:,} results of {args.result_bytes:,} bytes, page_size={args.page_size}; "
        f"medians of {args.repeat}"
    )
    print(
        f"{'store':9} {'whole peak MiB':>15} {'paged peak MiB':>15} {'whole s':>8} {'paged s':>8}"
    )
    for kind in args.stores.split(","):
        store = make_store(kind)
        try:
            runs = [run(kind, store, args) for _ in range(args.repeat)]
        finally:
            store.close()

        def med(key: str, runs: list[dict[str, float]] = runs) -> float:
            return statistics.median(r[key] for r in runs)

        print(
            f"{kind:9} {med('whole_peak_mb'):15.1f} {med('paged_peak_mb'):15.1f} "
            f"{med('whole_s'):8.3f} {med('paged_s'):8.3f}"
        )


if __name__ == "__main__":
    main()

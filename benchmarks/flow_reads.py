"""What one refresh of the flow-control surfaces costs: ``key_counts`` (running
and waiting jobs per concurrency key) against the listing of active jobs it
replaces (``key_counts([])``: the running keyed groups alone, as that listing
gave; ``key_counts(["sync"])`` adds the pass over the task's waiting jobs), and
``rate_key_usage`` (starts per rate-limit key).

Per store (memory, a SQLite file, the PostgreSQL and Redis of
``CONVEYOR_BENCH_POSTGRES_URL`` / ``CONVEYOR_BENCH_REDIS_URL``, each in a fresh
schema or key prefix): ``--waiting`` jobs of a key-capped task over ``--keys``
keys, ``--active`` of them claimed under a cap of ``--active // --keys + 1``,
and ``--keys`` rate windows with a start each. Medians of ``--repeat`` reads.

    .venv/bin/python benchmarks/flow_reads.py --waiting 20000 --active 200 --keys 100

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
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from conveyor.backends.base import Backend, ClaimRequest, JobFilter
from conveyor.backends.registry import backend_from_url
from conveyor.job import JobState
from conveyor.ratelimit import RateLimit
from conveyor.testing.conformance.suite.helpers import new_job

RATES = {"call": RateLimit(1_000, 3600.0)}


async def timed(read: Callable[[], Awaitable[object]], repeat: int) -> float:
    """Median milliseconds of ``repeat`` calls of ``read``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await read()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def seed(backend: Backend, args: argparse.Namespace) -> None:
    keys = [f"acct-{i}" for i in range(args.keys)]
    jobs = [
        new_job("sync", concurrency_key=keys[i % args.keys])
        for i in range(args.waiting + args.active)
    ]
    for i in range(0, len(jobs), 1000):
        await backend.enqueue_jobs(jobs[i : i + 1000])
    cap = args.active // args.keys + 1
    got = 0
    while got < args.active:
        request = ClaimRequest(
            worker_id="w",
            queues=["default"],
            limit=args.active - got,
            lease=3600,
            key_limits={"sync": cap},
        )
        got += len((await backend.claim_jobs(request)).jobs)
    calls = [new_job("call", "calls", rate_limit_key=key) for key in keys]
    await backend.enqueue_jobs(calls)
    request = ClaimRequest(
        worker_id="w", queues=["calls"], limit=len(calls), lease=3600, key_rate_limits=RATES
    )
    await backend.claim_jobs(request)


async def measure(url: str, args: argparse.Namespace) -> dict[str, float]:
    backend = backend_from_url(url)
    await backend.open()
    try:
        await seed(backend, args)
        active = JobFilter(states=[JobState.ACTIVE])
        return {
            "list_jobs(active)": await timed(
                lambda: backend.list_jobs(active, limit=10_000), args.repeat
            ),
            "key_counts(no task)": await timed(lambda: backend.key_counts([], 100), args.repeat),
            "key_counts": await timed(lambda: backend.key_counts(["sync"], 100), args.repeat),
            "rate_key_usage": await timed(lambda: backend.rate_key_usage(RATES, 100), args.repeat),
        }
    finally:
        await backend.close()


async def drop(url: str, tag: str) -> None:
    """Remove what the run left in the shared PostgreSQL database or Redis."""
    if url.startswith("postgresql"):
        import asyncpg

        conn = await asyncpg.connect(url.split("?")[0])
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{tag}" CASCADE')  # tag: flow + hex
        finally:
            await conn.close()
    elif url.startswith("redis"):
        from redis.asyncio import Redis

        client = Redis.from_url(url.split("?")[0])
        names = [name async for name in client.scan_iter(match=f"{{conveyor:{tag}}}:*")]
        for i in range(0, len(names), 1_000):
            await client.unlink(*names[i : i + 1_000])
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waiting", type=int, default=20_000)
    parser.add_argument("--active", type=int, default=200)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    tag = "flow" + uuid.uuid4().hex[:8]
    urls = {"memory": f"memory://{tag}"}
    with tempfile.TemporaryDirectory() as folder:
        urls["sqlite"] = f"sqlite:///{folder}/jobs.db"
        if pg := os.environ.get("CONVEYOR_BENCH_POSTGRES_URL"):
            urls["postgres"] = f"{pg}?schema={tag}"
        if redis := os.environ.get("CONVEYOR_BENCH_REDIS_URL"):
            urls["redis"] = f"{redis}?prefix={tag}"
        for name, url in urls.items():
            try:
                figures = asyncio.run(measure(url, args))
            finally:
                asyncio.run(drop(url, tag))
            row = "  ".join(f"{what} {ms:.2f} ms" for what, ms in figures.items())
            print(f"{name:9} {row}", flush=True)


if __name__ == "__main__":
    main()

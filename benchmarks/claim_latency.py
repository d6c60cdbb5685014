#!/usr/bin/env python3
"""Claim latency of a backend with few and with very many jobs stored.

    python benchmarks/claim_latency.py                     # PostgreSQL on 127.0.0.1:5432
    python benchmarks/claim_latency.py --big 100000 --samples 300
    python benchmarks/claim_latency.py --url redis://127.0.0.1:6390/0   # any backend URL

Drives the backend contract directly (``backend_from_url(url)``), with no
worker: one sample = ``claim_jobs(ClaimRequest(limit=--batch))`` then
``settle_jobs`` of what it claimed (COMPLETE), each timed on its own; after each
sample the same number of jobs is enqueued again (not timed), so the waiting
count stays where the scenario put it. Scenarios, in order:

1. ``small``: ``--small`` (1,000) waiting jobs, fresh store.
2. ``big``: ``--big`` (1,000,000) waiting jobs, fresh store (enqueued with
   ``enqueue_jobs`` in batches of 5,000; the rate is reported).
3. ``kept``: the same store after all of those were claimed and completed in
   large batches (not timed): ``--big`` completed rows kept, ``--small`` waiting.
4. ``vacuumed`` (PostgreSQL): ``kept`` after ``VACUUM (ANALYZE)``, the state
   autovacuum brings it to; ``kept`` itself is the worst moment, right after a
   million completions left dead entries at the head of the claim index.

With ``--pg-url`` (the default) each scenario store is a fresh database on that
server, dropped afterwards; with ``--url`` every scenario runs on the backend at
that URL as it is, one after the other (so the counts add up; give it an empty
database or key space of its own: nothing is cleaned up).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import fmt, percentile  # noqa: E402

TASK = "bench.noop"
QUEUE = "default"
ENQUEUE_BATCH = 5_000
DRAIN_BATCH = 1_000
WARMUP = 100  # untimed samples first: connections, prepared statements, caches


def new_jobs(count: int) -> list[Any]:
    from conveyor.backends.base import NewJob
    from conveyor.ids import new_ids

    ids: list[str] = []
    while len(ids) < count:  # new_ids hands out at most 65,535 per call
        ids += new_ids(min(count - len(ids), 50_000))
    return [NewJob(id=job_id, task=TASK, queue=QUEUE, payload=b"{}") for job_id in ids]


async def enqueue(backend: Any, count: int) -> float:
    """``count`` jobs in batches; returns seconds taken."""
    t0 = time.perf_counter()
    left = count
    while left:
        size = min(ENQUEUE_BATCH, left)
        await backend.enqueue_jobs(new_jobs(size))
        left -= size
    return time.perf_counter() - t0


async def claim_and_settle(backend: Any, limit: int) -> tuple[int, float, float]:
    """One claim of up to ``limit`` and the settle of what it got: (jobs, claim s, settle s)."""
    from conveyor.backends.base import ClaimRequest, Outcome, Settlement

    t0 = time.perf_counter()
    claimed = await backend.claim_jobs(
        ClaimRequest(worker_id="bench-claims", queues=[QUEUE], limit=limit, lease=60.0)
    )
    t1 = time.perf_counter()
    if claimed.jobs:
        await backend.settle_jobs(
            [
                Settlement(job.id, job.lease_token or "", Outcome.COMPLETE, job.task)
                for job in claimed.jobs
            ]
        )
    t2 = time.perf_counter()
    return len(claimed.jobs), t1 - t0, t2 - t1


async def measure(backend: Any, samples: int, batch: int, warmup: int) -> dict[str, float]:
    claims: list[float] = []
    settles: list[float] = []
    for i in range(warmup + samples):
        got, claim_s, settle_s = await claim_and_settle(backend, batch)
        if got != batch:
            raise RuntimeError(f"claimed {got} jobs, expected {batch}: the store ran dry")
        if i >= warmup:
            claims.append(claim_s * 1000)
            settles.append(settle_s * 1000)
        await enqueue(backend, got)  # keep the waiting count level
    totals = [c + s for c, s in zip(claims, settles, strict=True)]
    return {
        "claim_p50_ms": percentile(claims, 50),
        "claim_p99_ms": percentile(claims, 99),
        "claim_mean_ms": statistics.fmean(claims),
        "settle_p50_ms": percentile(settles, 50),
        "settle_p99_ms": percentile(settles, 99),
        "claim_settle_p99_ms": percentile(totals, 99),
    }


async def drain_all(backend: Any) -> int:
    done = 0
    while True:
        got, _, _ = await claim_and_settle(backend, DRAIN_BATCH)
        done += got
        if got < DRAIN_BATCH:
            return done


async def vacuum(url: str) -> None:
    """``VACUUM (ANALYZE)`` the store's database, as autovacuum would in time."""
    import asyncpg

    conn = await asyncpg.connect(url.split("?", 1)[0])
    try:
        await conn.execute("VACUUM (ANALYZE)")
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def opened(url: str) -> AsyncIterator[Any]:
    from conveyor.backends.registry import backend_from_url

    backend = backend_from_url(url)
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


@contextlib.asynccontextmanager
async def fresh_url(args: argparse.Namespace, label: str) -> AsyncIterator[str]:
    if args.url:
        yield args.url
        return
    import asyncpg

    from benchmarks.stores import PostgresStore

    database = f"bench_claims_{label}_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(args.pg_url)
    try:
        await admin.execute(f'CREATE DATABASE "{database}"')
    finally:
        await admin.close()
    try:
        yield PostgresStore.url_for_database(args.pg_url, database)
    finally:
        admin = await asyncpg.connect(args.pg_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        finally:
            await admin.close()


async def run(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}

    def show(name: str, values: dict[str, float]) -> None:
        out[name] = values
        print(f"  {name:<6} " + ", ".join(f"{k}={fmt(v)}" for k, v in values.items()), flush=True)

    async with fresh_url(args, "small") as url, opened(url) as backend:
        await enqueue(backend, args.small)
        values = await measure(backend, args.samples, args.batch, WARMUP)
        show("small", {"waiting": args.small, **values})

    async with fresh_url(args, "big") as url, opened(url) as backend:
        enqueue_s = await enqueue(backend, args.big)
        print(f"  enqueued {args.big:,} jobs in {enqueue_s:.1f}s", flush=True)
        values = await measure(backend, args.samples, args.batch, WARMUP)
        show("big", {"waiting": args.big, "enqueue_per_s": args.big / enqueue_s, **values})
        if args.kept:
            t0 = time.perf_counter()
            drained = await drain_all(backend)
            print(f"  completed {drained:,} jobs in {time.perf_counter() - t0:.1f}s", flush=True)
            await enqueue(backend, args.small)
            values = await measure(backend, args.samples, args.batch, WARMUP)
            show("kept", {"waiting": args.small, "completed_kept": drained, **values})
            if not url.startswith(("postgresql://", "postgres://")):
                return out
            # Right after a million completions the claim index still holds their
            # dead entries, ahead of every live one, until (auto)vacuum removes
            # them; the same store after that vacuum is the steady state.
            t0 = time.perf_counter()
            await vacuum(url)
            print(f"  vacuumed in {time.perf_counter() - t0:.1f}s", flush=True)
            values = await measure(backend, args.samples, args.batch, WARMUP)
            show("vacuumed", {"waiting": args.small, "completed_kept": drained, **values})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", help="a backend URL to use as it is (no fresh databases)")
    parser.add_argument(
        "--pg-url",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="PostgreSQL admin URL: a fresh database per scenario (the default store)",
    )
    parser.add_argument("--small", type=int, default=1_000, help="waiting jobs, small (1,000)")
    parser.add_argument("--big", type=int, default=1_000_000, help="waiting jobs, big (1,000,000)")
    parser.add_argument("--samples", type=int, default=1_000, help="timed claims per scenario")
    parser.add_argument("--batch", type=int, default=50, help="jobs per claim (50)")
    parser.add_argument("--no-kept", dest="kept", action="store_false", help="skip 'kept'")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    if args.small < args.batch:
        parser.error("--small must be at least --batch")

    print(f"claim latency: store={args.url or args.pg_url} batch={args.batch} "
          f"samples={args.samples}", flush=True)  # fmt: skip
    figures = asyncio.run(run(args))
    small, big = figures["small"], figures["big"]
    ratio = big["claim_p99_ms"] / small["claim_p99_ms"]
    print(f"\nclaim p99 with {args.big:,} waiting / with {args.small:,} waiting: {ratio:.2f}x "
          f"(target <= 2x: {'met' if ratio <= 2 else 'NOT met'})")  # fmt: skip
    if "kept" in figures:
        kept_ratio = figures["kept"]["claim_p99_ms"] / small["claim_p99_ms"]
        print(f"claim p99 with {figures['kept']['completed_kept']:,.0f} completed kept / "
              f"without: {kept_ratio:.2f}x right after the completions")  # fmt: skip
    if "vacuumed" in figures:
        vacuumed_ratio = figures["vacuumed"]["claim_p99_ms"] / small["claim_p99_ms"]
        print(f"claim p99 with them kept, after a vacuum / without: {vacuumed_ratio:.2f}x")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        config = {k: v for k, v in vars(args).items() if k != "json"}
        args.json.write_text(json.dumps({"config": config, "figures": figures}, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

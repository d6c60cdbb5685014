"""Rate limits per key: what a per-key window costs a drain that stays under it.

For each store, ``--jobs`` jobs of ``--job-ms`` over 10 keys, drained by one
in-process burst worker at concurrency 20, three ways, interleaved, medians of
``--repeat`` (a fresh store per run):

- **keyed**: ``rate_limit="100000/s", rate_limit_key=<the job's key>`` (each
  key far under its limit, so only the windows' bookkeeping costs);
- **task-wide**: ``rate_limit="100000/s"`` (today's one window per task);
- **plain**: no rate limit.

Prints each drain rate and the ratios keyed/plain and keyed/task-wide. A drain
is timed to its last job's end: a burst worker with a rate limit waits one
period after its last claim before it stops (a window may still slide), which
is not work.

    .venv/bin/python benchmarks/rate_limit_key.py --stores sqlite,redis --repeat 3

Run by hand, never as part of the test gate.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.flow_control import fresh_url
from benchmarks.stores import RedisStore
from conveyor import Conveyor, JobContext

KEYS = 10
RATE = "100000/s"
MODES = ("keyed", "task-wide", "plain")


def build_app(url: str, mode: str, job_seconds: float, ends: list[float]) -> Conveyor:
    app = Conveyor(url, circuit_threshold=0)
    options: dict[str, Any] = {}
    if mode != "plain":
        options["rate_limit"] = RATE
    if mode == "keyed":
        options["rate_limit_key"] = lambda p: p["key"]

    @app.task("work", **options)
    async def work(ctx: JobContext, key: str) -> None:
        if job_seconds:
            await asyncio.sleep(job_seconds)
        ends.append(time.perf_counter())

    return app


async def drain_rate(url: str, mode: str, jobs: int, job_seconds: float) -> float:
    ends: list[float] = []
    app = build_app(url, mode, job_seconds, ends)
    try:
        payloads = [("work", {"key": f"k{i % KEYS}"}) for i in range(jobs)]
        for start in range(0, jobs, 1000):
            await app.enqueue_many(payloads[start : start + 1000])
        began = time.perf_counter()
        done = await app.drain(concurrency=20)
        elapsed = max(ends) - began
        if done != jobs:
            raise RuntimeError(f"drained {done} of {jobs}")
        return jobs / elapsed
    finally:
        await app.close()


def measure(store: str, args: argparse.Namespace) -> None:
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    redis = RedisStore() if store == "redis" else None
    try:
        for repetition in range(args.repeat):
            for mode in MODES:
                with fresh_url(store, f"{mode.replace('-', '')}{repetition}", redis) as url:
                    rate = asyncio.run(drain_rate(url, mode, args.jobs, args.job_ms / 1000))
                    rates[mode].append(rate)
    finally:
        if redis is not None:
            redis.close()
    keyed_plain = [k / p for k, p in zip(rates["keyed"], rates["plain"], strict=True)]
    keyed_task = [k / t for k, t in zip(rates["keyed"], rates["task-wide"], strict=True)]
    print(
        f"{store:8} "
        + "  ".join(f"{mode} {statistics.median(rates[mode]):7,.0f}/s" for mode in MODES)
        + f"  keyed/plain {statistics.median(keyed_plain):.2f} "
        f"({', '.join(f'{r:.2f}' for r in keyed_plain)})"
        f"  keyed/task-wide {statistics.median(keyed_task):.2f} "
        f"({', '.join(f'{r:.2f}' for r in keyed_task)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--job-ms", type=float, default=0.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,redis")
    args = parser.parse_args()
    print(
        f"{args.jobs} jobs of {args.job_ms:g} ms over {KEYS} keys at -c 20, {RATE} "
        f"per key / per task / none; medians of {args.repeat}"
    )
    for store in args.stores.split(","):
        measure(store, args)


if __name__ == "__main__":
    main()

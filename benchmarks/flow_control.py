"""Flow control: what a per-key cap costs, and a debounce storm.

For each store (SQLite file, PostgreSQL database, Redis on its own
redis-server), two measurements, medians of ``--repeat``:

- **cap**: ``--jobs`` jobs of 10 ms over 10 keys, drained by one in-process
  burst worker. Capped: ``key_concurrency=2`` per key at concurrency 50 (so at
  most 20 run at once); uncapped: the same jobs at concurrency 20. Prints both
  drain rates, their ratio (target >= 0.80) and the highest number of jobs of
  one key seen running at once (must be <= 2).
- **debounce**: 4 producer processes enqueue ``--storm`` debounced jobs in all
  over 10 idempotency keys; then a worker runs what is due. Prints the storm's
  enqueues/s, how many jobs ran (target: exactly 10) and whether each ran with
  a payload its key was given last by some producer.

    .venv/bin/python benchmarks/flow_control.py --stores sqlite,postgres,redis --repeat 3

Run by hand, never as part of the test gate.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.stores import PostgresStore, RedisStore
from conveyor import Conveyor, JobContext

KEYS = 10
CAP = 2
JOB_SECONDS = 0.01
PG_ADMIN = "postgresql://root@127.0.0.1:5432/test"


class Peak:
    """Jobs running at once per key, and the highest count seen."""

    def __init__(self) -> None:
        self.now: Counter[str] = Counter()
        self.peak = 0


def build_app(url: str, capped: bool, peak: Peak) -> Conveyor:
    app = Conveyor(url, circuit_threshold=0)
    options: dict[str, Any] = (
        {"key_concurrency": CAP, "concurrency_key": lambda p: p["key"]} if capped else {}
    )

    @app.task("work", **options)
    async def work(ctx: JobContext, key: str) -> None:
        peak.now[key] += 1
        peak.peak = max(peak.peak, peak.now[key])
        await asyncio.sleep(JOB_SECONDS)
        peak.now[key] -= 1

    @app.task("storm")
    async def storm(ctx: JobContext, key: str, producer: int, n: int) -> dict[str, Any]:
        return {"key": key, "producer": producer, "n": n}

    return app


async def drain_rate(url: str, capped: bool, jobs: int) -> tuple[float, int]:
    peak = Peak()
    app = build_app(url, capped, peak)
    try:
        payloads = [("work", {"key": f"k{i % KEYS}"}) for i in range(jobs)]
        for start in range(0, jobs, 1000):
            await app.enqueue_many(payloads[start : start + 1000])
        began = time.perf_counter()
        done = await app.drain(concurrency=50 if capped else 20)
        elapsed = time.perf_counter() - began
        if done != jobs:
            raise RuntimeError(f"drained {done} of {jobs}")
        return jobs / elapsed, peak.peak
    finally:
        await app.close()


def _produce(url: str, producer: int, count: int, out: Any) -> None:
    async def go() -> list[tuple[str, int]]:
        app = Conveyor(url)
        last: dict[str, int] = {}
        try:
            for n in range(count):
                key = f"k{(n + producer) % KEYS}"
                await app.enqueue(
                    "storm",
                    {"key": key, "producer": producer, "n": n},
                    idempotency_key=key,
                    debounce=1.0,
                )
                last[key] = n
        finally:
            await app.close()
        return sorted(last.items())

    out.put((producer, asyncio.run(go())))


async def storm(url: str, total: int) -> tuple[float, int, bool]:
    """Enqueues/s of the storm, jobs run, and whether each ran a last payload."""
    peak = Peak()
    app = build_app(url, False, peak)
    await app.connect()  # the schema exists before the producers race to create it
    context = multiprocessing.get_context("spawn")
    results: Any = context.Queue()
    producers = [
        context.Process(target=_produce, args=(url, p, total // 4, results)) for p in range(4)
    ]
    began = time.perf_counter()
    for proc in producers:
        proc.start()
    last_of: dict[str, set[tuple[int, int]]] = {}
    for _ in producers:
        producer, lasts = results.get()
        for key, n in lasts:
            last_of.setdefault(key, set()).add((producer, n))
    for proc in producers:
        proc.join()
    rate = total / (time.perf_counter() - began)
    try:
        await asyncio.sleep(1.2)  # every key's job is due 1 s after its last enqueue
        ran = await app.drain()
        jobs = await app.list_jobs(task="storm", limit=100)
        fresh = all(
            (job.result["producer"], job.result["n"]) in last_of[job.result["key"]]
            for job in jobs
            if job.result
        )
        return rate, ran, fresh
    finally:
        await app.close()


@contextmanager
def fresh_url(store: str, label: str, redis: RedisStore | None) -> Iterator[str]:
    if store == "redis":
        assert redis is not None
        with redis.fresh(label) as url:
            assert url is not None
            yield url
    elif store == "postgres":
        with PostgresStore(PG_ADMIN).fresh(label) as url:
            assert url is not None
            yield url
    else:
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/{label}.db"


def measure(store: str, args: argparse.Namespace) -> None:
    capped: list[float] = []
    uncapped: list[float] = []
    peaks: list[int] = []
    storms: list[tuple[float, int, bool]] = []
    redis = RedisStore() if store == "redis" else None
    try:
        for repetition in range(args.repeat):
            with fresh_url(store, f"cap{repetition}", redis) as url:
                rate, peak = asyncio.run(drain_rate(url, True, args.jobs))
                capped.append(rate)
                peaks.append(peak)
            with fresh_url(store, f"free{repetition}", redis) as url:
                uncapped.append(asyncio.run(drain_rate(url, False, args.jobs))[0])
            with fresh_url(store, f"storm{repetition}", redis) as url:
                storms.append(asyncio.run(storm(url, args.storm)))
    finally:
        if redis is not None:
            redis.close()
    ratios = [c / u for c, u in zip(capped, uncapped, strict=True)]
    print(
        f"{store:8} capped {statistics.median(capped):8,.0f}/s  uncapped "
        f"{statistics.median(uncapped):8,.0f}/s  ratio {statistics.median(ratios):.2f} "
        f"(each: {', '.join(f'{r:.2f}' for r in ratios)})  peak per key {max(peaks)}"
    )
    print(
        f"{store:8} debounce storm {statistics.median(s[0] for s in storms):8,.0f} enqueues/s  "
        f"jobs run {[s[1] for s in storms]}  last payloads {all(s[2] for s in storms)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--storm", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,postgres,redis")
    args = parser.parse_args()
    print(
        f"cap: {args.jobs} jobs of {JOB_SECONDS * 1000:.0f} ms over {KEYS} keys, "
        f"key_concurrency={CAP} at -c 50 vs uncapped at -c 20; "
        f"storm: {args.storm} debounced enqueues from 4 processes; medians of {args.repeat}"
    )
    for store in args.stores.split(","):
        measure(store, args)


if __name__ == "__main__":
    main()

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
- **fair-pickup**: a fair queue (``fairness="tenant"``) worked by one worker
  at concurrency 20 on jobs of 10 ms; tenant B enqueues 100 jobs 10 ms apart,
  once while tenant A has ``--backlog`` jobs waiting and once with no backlog.
  Prints B's pickup (from just before ``enqueue`` to the handler's start: one
  process, one clock; ``started_at - created_at`` would read 0 on Redis, where
  a direct handoff claims the job inside the enqueue) p50/p99 both ways and
  the p99 ratio (target <= 2). ``--prefetch`` sets the worker's buffer (default:
  adaptive; a busy worker then claims only when half its buffer is gone).
- **fair-drain**: the W1 drain (``--drain-jobs`` no-op jobs, one worker at its
  default concurrency) over 100 tenants, from a fair queue and from the same
  queue plain. Prints both rates and their ratio (target >= 0.85).

    .venv/bin/python benchmarks/flow_control.py --stores sqlite,postgres,redis --repeat 3
    .venv/bin/python benchmarks/flow_control.py --stores sqlite --only fair-pickup,fair-drain

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


FAIR_QUEUE = "fair"
TENANTS = 100
B_JOBS = 100
B_GAP = 0.01


def fair_app(
    url: str, fair: bool, seconds: float, started: dict[str, float] | None = None
) -> Conveyor:
    app = Conveyor(url, circuit_threshold=0)
    app.queue(FAIR_QUEUE, fairness="tenant" if fair else None)

    @app.task("fair.work", queue=FAIR_QUEUE)
    async def work(ctx: JobContext) -> None:
        if started is not None and ctx.job.tenant == "B":
            started[ctx.job.id] = time.perf_counter()
        if seconds:
            await asyncio.sleep(seconds)

    return app


async def fair_pickup(url: str, backlog: int, prefetch: int | None) -> list[float]:
    """B's pickups (seconds, sorted) while tenant A has ``backlog`` jobs waiting."""
    started: dict[str, float] = {}
    app = fair_app(url, True, JOB_SECONDS, started)
    try:
        a_jobs = [("fair.work", {}, {"tenant": "A"})] * backlog
        for start in range(0, backlog, 1000):
            await app.enqueue_many(a_jobs[start : start + 1000])
        worker = app.worker(
            queues=[FAIR_QUEUE], concurrency=20, prefetch=prefetch, install_signals=False
        )
        running = asyncio.create_task(worker.run())
        await asyncio.sleep(1.0)  # the worker is claiming (A's backlog, if any)
        sent: dict[str, float] = {}
        for _ in range(B_JOBS):
            before = time.perf_counter()
            sent[(await app.enqueue("fair.work", tenant="B")).id] = before
            await asyncio.sleep(B_GAP)
        deadline = time.monotonic() + 120
        while await app.count_jobs("completed", tenant="B") < B_JOBS:
            if time.monotonic() > deadline:
                raise RuntimeError("tenant B's jobs did not all run in 120 s")
            await asyncio.sleep(0.1)
        worker.stop()
        await running
        if backlog and await app.count_jobs("waiting", tenant="A") == 0:
            raise RuntimeError("A's backlog ran out before B was done: raise --backlog")
        return sorted(started[job_id] - sent[job_id] for job_id in sent)
    finally:
        await app.close()


async def fair_drain(url: str, fair: bool, jobs: int) -> tuple[float, float]:
    """Jobs/s of the W1 drain over ``TENANTS`` tenants, from a fair or plain queue,
    and the process CPU seconds per job it took (less swayed by a loaded host)."""
    app = fair_app(url, fair, 0.0)
    try:
        payloads = [("fair.work", {}, {"tenant": f"t{i % TENANTS}"}) for i in range(jobs)]
        for start in range(0, jobs, 1000):
            await app.enqueue_many(payloads[start : start + 1000])
        began, cpu = time.perf_counter(), time.process_time()
        done = await app.drain(queues=[FAIR_QUEUE])
        elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
        if done != jobs:
            raise RuntimeError(f"drained {done} of {jobs}")
        return jobs / elapsed, cpu / jobs
    finally:
        await app.close()


def percentile(values: list[float], share: float) -> float:
    return values[min(len(values) - 1, int(share * len(values)))]


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


def measure_fair(store: str, args: argparse.Namespace) -> None:
    quiet: list[list[float]] = []
    loaded: list[list[float]] = []
    fair_rates: list[tuple[float, float]] = []
    plain_rates: list[tuple[float, float]] = []
    redis = RedisStore() if store == "redis" else None
    try:
        for repetition in range(args.repeat):
            if "fair-pickup" in args.only:
                with fresh_url(store, f"quiet{repetition}", redis) as url:
                    quiet.append(asyncio.run(fair_pickup(url, 0, args.prefetch)))
                with fresh_url(store, f"backlog{repetition}", redis) as url:
                    loaded.append(asyncio.run(fair_pickup(url, args.backlog, args.prefetch)))
            if "fair-drain" in args.only:
                with fresh_url(store, f"fair{repetition}", redis) as url:
                    fair_rates.append(asyncio.run(fair_drain(url, True, args.drain_jobs)))
                with fresh_url(store, f"plain{repetition}", redis) as url:
                    plain_rates.append(asyncio.run(fair_drain(url, False, args.drain_jobs)))
    finally:
        if redis is not None:
            redis.close()
    if quiet:
        p99_quiet = [percentile(run, 0.99) for run in quiet]
        p99_loaded = [percentile(run, 0.99) for run in loaded]
        ratios = [b / q for b, q in zip(p99_loaded, p99_quiet, strict=True)]
        print(
            f"{store:8} fair pickup of B, ms: no backlog p50 "
            f"{statistics.median(percentile(r, 0.5) for r in quiet) * 1000:.1f} p99 "
            f"{statistics.median(p99_quiet) * 1000:.1f}; A {args.backlog:,} waiting p50 "
            f"{statistics.median(percentile(r, 0.5) for r in loaded) * 1000:.1f} p99 "
            f"{statistics.median(p99_loaded) * 1000:.1f}; p99 ratio "
            f"{statistics.median(ratios):.2f} (each: {', '.join(f'{r:.2f}' for r in ratios)})"
        )
    if fair_rates:
        ratios = [f[0] / p[0] for f, p in zip(fair_rates, plain_rates, strict=True)]
        cpu = [p[1] / f[1] for f, p in zip(fair_rates, plain_rates, strict=True)]
        each = ", ".join(f"{r:.2f}" for r in ratios)
        print(
            f"{store:8} W1 drain over {TENANTS} tenants: fair "
            f"{statistics.median(f[0] for f in fair_rates):8,.0f}/s  plain "
            f"{statistics.median(p[0] for p in plain_rates):8,.0f}/s  ratio "
            f"{statistics.median(ratios):.2f} (each: {each}); CPU per job fair "
            f"{statistics.median(f[1] for f in fair_rates) * 1e6:.0f} us, plain "
            f"{statistics.median(p[1] for p in plain_rates) * 1e6:.0f} us, plain/fair "
            f"{statistics.median(cpu):.2f} (each: {', '.join(f'{c:.2f}' for c in cpu)})"
        )


def measure(store: str, args: argparse.Namespace) -> None:
    if not {"cap", "storm"} & set(args.only):
        return
    capped: list[float] = []
    uncapped: list[float] = []
    peaks: list[int] = []
    storms: list[tuple[float, int, bool]] = []
    redis = RedisStore() if store == "redis" else None
    try:
        for repetition in range(args.repeat):
            if "cap" in args.only:
                with fresh_url(store, f"cap{repetition}", redis) as url:
                    rate, peak = asyncio.run(drain_rate(url, True, args.jobs))
                    capped.append(rate)
                    peaks.append(peak)
                with fresh_url(store, f"free{repetition}", redis) as url:
                    uncapped.append(asyncio.run(drain_rate(url, False, args.jobs))[0])
            if "storm" in args.only:
                with fresh_url(store, f"storm{repetition}", redis) as url:
                    storms.append(asyncio.run(storm(url, args.storm)))
    finally:
        if redis is not None:
            redis.close()
    if not capped:
        return
    ratios = [c / u for c, u in zip(capped, uncapped, strict=True)]
    print(
        f"{store:8} capped {statistics.median(capped):8,.0f}/s  uncapped "
        f"{statistics.median(uncapped):8,.0f}/s  ratio {statistics.median(ratios):.2f} "
        f"(each: {', '.join(f'{r:.2f}' for r in ratios)})  peak per key {max(peaks)}"
    )
    if not storms:
        return
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
    parser.add_argument("--backlog", type=int, default=50_000)
    parser.add_argument("--drain-jobs", type=int, default=20_000)
    parser.add_argument(
        "--prefetch",
        type=int,
        default=None,
        help="fair-pickup's worker prefetch (default: adaptive)",
    )
    parser.add_argument(
        "--only",
        default="cap,storm,fair-pickup,fair-drain",
        type=lambda text: text.split(","),
        help="comma list of cap, storm, fair-pickup, fair-drain",
    )
    args = parser.parse_args()
    print(
        f"cap: {args.jobs} jobs of {JOB_SECONDS * 1000:.0f} ms over {KEYS} keys, "
        f"key_concurrency={CAP} at -c 50 vs uncapped at -c 20; "
        f"storm: {args.storm} debounced enqueues from 4 processes; medians of {args.repeat}"
    )
    for store in args.stores.split(","):
        measure(store, args)
        measure_fair(store, args)


if __name__ == "__main__":
    main()

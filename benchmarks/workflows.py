"""Workflows: how soon a chord's callback starts, and how fast a chain moves.

For each store (SQLite file, Redis on its own ``redis-server``, a fresh
PostgreSQL database per run), on a fresh store each time:

- chord: ``--children`` no-op children and one callback; the callback's latency
  is its ``started_at`` minus the latest ``finished_at`` of its children (both
  stamped by the store's clock), i.e. the time from the last child's settle to
  the callback running;
- chain: ``--steps`` no-op steps one after another; steps/s is the number of
  steps over the time from the first step's start to the last one's finish.

One worker at concurrency 50 runs in the benchmark's process. Prints the
median of ``--repeat`` runs of each, and every run.

    .venv/bin/python benchmarks/workflows.py --repeat 3
    .venv/bin/python benchmarks/workflows.py --stores sqlite --children 2000 --steps 200

Run by hand, never as part of the test gate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.stores import PostgresStore, RedisStore, Store
from conveyor import Conveyor, JobContext, Workflow, chain, chord, group
from conveyor.workflow import Node

CONCURRENCY = 50


def build_app(url: str) -> Conveyor:
    app = Conveyor(url, circuit_threshold=0)

    @app.task("noop")
    async def noop(ctx: JobContext) -> None:
        return None

    return app


async def run_workflow(url: str, make: Callable[[Conveyor], Node], timeout: float) -> Workflow:
    """Start the workflow ``make`` builds, run a worker until it finishes, and
    return it as stored at the end."""
    app = build_app(url)
    try:
        workflow = await app.start(make(app))
        worker = app.worker(concurrency=CONCURRENCY, install_signals=False)
        task = asyncio.create_task(worker.run())
        try:
            await workflow.wait(timeout=timeout, poll=0.2)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 60)
        return workflow
    finally:
        await app.close()


async def chord_latency(url: str, children: int) -> float:
    """Seconds from the last child's finish to the callback's start."""

    def make(app: Conveyor) -> Node:
        noop = app.tasks["noop"]
        return chord(group(*(noop.step() for _ in range(children))), noop.step())

    workflow = await run_workflow(url, make, timeout=600)
    *members, callback = workflow.jobs
    last = max(job.finished_at or 0.0 for job in members)
    assert callback.started_at is not None
    return callback.started_at - last


async def chain_rate(url: str, steps: int) -> float:
    """Steps per second along a chain of ``steps`` no-op steps."""

    def make(app: Conveyor) -> Node:
        noop = app.tasks["noop"]
        return chain(*(noop.step() for _ in range(steps)))

    workflow = await run_workflow(url, make, timeout=600)
    first, last = workflow.jobs[0], workflow.jobs[-1]
    assert first.started_at is not None
    assert last.finished_at is not None
    return steps / (last.finished_at - first.started_at)


def one_run(
    store: Store, label: str, measure: Callable[[str], Coroutine[Any, Any, float]]
) -> float:
    """``measure(url)`` on a fresh store (a temp SQLite file when the store has no server)."""
    with store.fresh(label) as url:
        if url is not None:
            return asyncio.run(measure(url))
        with tempfile.TemporaryDirectory() as tmp:
            return asyncio.run(measure(f"sqlite:///{tmp}/{label}.db"))


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
    parser.add_argument("--children", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,redis,postgres")
    args = parser.parse_args()
    print(
        f"chord of {args.children:,} no-op children, chain of {args.steps:,} no-op steps, "
        f"one worker at -c {CONCURRENCY}, median of {args.repeat}"
    )
    print(f"{'store':9} {'callback latency':>17} {'chain steps/s':>14}   runs")
    for kind in args.stores.split(","):
        store = make_store(kind)
        try:
            latencies, rates = [], []
            for _ in range(args.repeat):
                latencies.append(
                    one_run(store, "chord", lambda url: chord_latency(url, args.children))
                )
                rates.append(one_run(store, "chain", lambda url: chain_rate(url, args.steps)))
        finally:
            store.close()
        runs = ", ".join(f"{lat * 1000:.1f} ms" for lat in latencies)
        runs += "; " + ", ".join(f"{rate:.0f}/s" for rate in rates)
        print(
            f"{kind:9} {statistics.median(latencies) * 1000:14.1f} ms "
            f"{statistics.median(rates):14.0f}   {runs}"
        )


if __name__ == "__main__":
    main()

"""Workflows: a group's drain against the plain W1 drain, a chord's callback
delay and end-to-end time (and Celery's, on Redis), a chain's steps per second.

For each store (SQLite file, Redis on the benchmark's own ``redis-server``, a
fresh PostgreSQL database per run), on a fresh store each time, with one real
worker process (run.py's: ``python -m conveyor worker
benchmarks.apps.conveyor_app:app -c 50``) and no-op steps:

- ``w1``: ``--children`` jobs enqueued with ``enqueue_many``, then the worker
  starts and drains them (run.py's W1); jobs/s from the first ``started_at`` to
  the last ``finished_at``;
- ``group``: the same jobs started as one ``group``, drained the same way
  (with the worker's CPU per job for both: steadier than wall time on a
  shared host);
- ``chord``: once the worker has run a warm-up job, a chord of ``--children``
  members and one callback: the callback's delay (its ``started_at`` minus the
  latest member's ``finished_at``), the members' drain, and end to end (from
  ``app.start`` to the callback's ``finished_at``);
- ``chain``: ``--steps`` steps one after another, steps/s;
- on Redis, ``celery``: Celery's chord of as many members on the same
  ``redis-server`` with its Redis result backend
  (benchmarks/peers/celery_chord_peer.py says how it is set up), measured the
  same way from its handlers' own clocks.

Repetitions interleave: each one runs every workload on every store before the
next begins, so a noisy moment of a shared host hits all of them. Prints
medians of ``--repeat`` and the ratios of the issue's targets.

    .venv/bin/python benchmarks/workflows.py --repeat 3 --json workflows.json
    .venv/bin/python benchmarks/workflows.py --stores sqlite --children 2000 --steps 200

Run by hand, never as part of the test gate.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.conveyor_workflows import WorkflowSide
from benchmarks.harness import Results, fmt
from benchmarks.stores import PostgresStore, RedisStore, Store

WORKLOADS = ("w1", "group", "chord", "chain")


def make_store(kind: str) -> Store:
    if kind == "redis":
        return RedisStore()
    if kind == "postgres":
        admin = os.environ.get(
            "CONVEYOR_BENCH_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/postgres"
        )
        return PostgresStore(admin)
    return Store()


def run_one(
    store: Store, system: str, workload: str, measure: Callable[[Any], dict[str, float]]
) -> dict[str, float]:
    """``measure(side)`` on a fresh store, in a fresh work dir."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-wf-{system}-{workload}-"))
    try:
        with store.fresh(f"{system}_{workload}") as url:
            side: Any
            if system == "celery":
                from benchmarks.peers.celery_chord_peer import CeleryChordSide

                assert url is not None
                side = CeleryChordSide(workdir, url, store.cpu_seconds)
            else:
                side = WorkflowSide(workdir, url, store.cpu_seconds)
            try:
                return measure(side)
            finally:
                side.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def conveyor_workload(workload: str, args: argparse.Namespace) -> Callable[[Any], dict[str, float]]:
    if workload == "w1":
        return lambda side: side.drain(args.children, 1)
    if workload == "group":
        return lambda side: side.group_drain(args.children)
    if workload == "chord":
        return lambda side: side.chord(args.children)
    return lambda side: side.chain(args.steps)


def ratios(results: Results, kind: str) -> dict[str, float]:
    """Per-repetition ratios of the targets, and their medians."""
    out: dict[str, float] = {}
    group = results.values(f"conveyor-{kind}", "group", "drain_per_s")
    plain = results.values(f"conveyor-{kind}", "w1", "drain_per_s")
    if group and plain:
        out["group_over_w1"] = statistics.median(g / p for g, p in zip(group, plain, strict=False))
    # CPU per job is steadier than wall time on a shared host: W1's over the group's
    # (below 1: a group job costs the worker more).
    group_cpu = results.values(f"conveyor-{kind}", "group", "drain_cpu_us_per_job")
    plain_cpu = results.values(f"conveyor-{kind}", "w1", "drain_cpu_us_per_job")
    if group_cpu and plain_cpu:
        out["w1_over_group_worker_cpu"] = statistics.median(
            p / g for g, p in zip(group_cpu, plain_cpu, strict=False)
        )
    if kind == "redis":
        ours = results.values("conveyor-redis", "chord", "end_to_end_s")
        theirs = results.values("celery-redis", "chord", "end_to_end_s")
        if ours and theirs:
            out["celery_over_conveyor_end_to_end"] = statistics.median(
                t / o for t, o in zip(theirs, ours, strict=False)
            )
    return out


def report(results: Results, kinds: list[str], args: argparse.Namespace) -> None:
    rows = [
        ("W1 drain, jobs/s", "w1", "drain_per_s"),
        ("W1 worker CPU/job (drain), us", "w1", "drain_cpu_us_per_job"),
        ("group drain, jobs/s", "group", "drain_per_s"),
        ("group worker CPU/job (drain), us", "group", "drain_cpu_us_per_job"),
        ("chord callback delay, ms", "chord", "callback_delay_ms"),
        ("chord members drain, jobs/s", "chord", "members_drain_per_s"),
        ("chord end to end, s", "chord", "end_to_end_s"),
        ("chain, steps/s", "chain", "steps_per_s"),
    ]
    systems = [f"conveyor-{k}" for k in kinds] + (
        ["celery-redis"] if "celery-redis" in results.raw else []
    )
    print(
        f"\n{args.children:,} children, chain of {args.steps:,}; medians of {args.repeat} "
        "(every run in brackets)"
    )
    for system in systems:
        print(f"\n{system}")
        for label, workload, metric in rows:
            values = results.values(system, workload, metric)
            if values:
                runs = ", ".join(fmt(v) for v in values)
                print(f"  {label:30} {fmt(statistics.median(values)):>10}   ({runs})")
    for kind in kinds:
        for name, value in ratios(results, kind).items():
            print(f"  {kind}: {name} = {value:.2f} (median of the per-repetition ratios)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--children", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,redis,postgres")
    parser.add_argument("--only", default=",".join(WORKLOADS), help="of w1,group,chord,chain")
    parser.add_argument("--no-celery", action="store_true", help="skip Celery's chord on Redis")
    parser.add_argument("--json", type=Path, help="write every run and the medians here")
    args = parser.parse_args()
    kinds = args.stores.split(",")
    only = [w for w in WORKLOADS if w in args.only.split(",")]
    stores = {kind: make_store(kind) for kind in kinds}
    results = Results()
    began = time.time()
    try:
        for rep in range(args.repeat):
            for kind, store in stores.items():
                runs = [("conveyor", w, conveyor_workload(w, args)) for w in only]
                if kind == "redis" and "chord" in only and not args.no_celery:
                    runs.append(("celery", "chord", lambda side: side.chord(args.children)))
                for system, workload, measure in runs:
                    label = f"{system}-{kind}"
                    print(f"  {label:15} {workload:5} #{rep + 1} ...", end="", flush=True)
                    t0 = time.perf_counter()
                    try:
                        values = run_one(store, system, workload, measure)
                    except Exception as exc:
                        results.errors.append(f"{label} {workload} #{rep + 1}: {exc}")
                        print(f" FAILED: {exc}", flush=True)
                        continue
                    results.add(label, workload, values)
                    shown = ", ".join(f"{k}={fmt(v)}" for k, v in values.items())
                    print(f" {time.perf_counter() - t0:5.1f}s  {shown}", flush=True)
    finally:
        facts = {k: v for store in stores.values() for k, v in store.facts().items()}
        for store in stores.values():
            store.close()
    report(results, kinds, args)
    for error in results.errors:
        print(f"  ! {error}")
    if args.json:
        out = {
            "began": began,
            "facts": facts,
            "args": vars(args) | {"json": str(args.json)},
            "runs": results.raw,
            "medians": results.medians(),
            "ratios": {kind: ratios(results, kind) for kind in kinds},
            "errors": results.errors,
        }
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

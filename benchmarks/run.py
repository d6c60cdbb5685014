#!/usr/bin/env python3
"""conveyor vs its peers on the same store, the same workloads, in one run.

    python benchmarks/run.py                                  # SQLite: conveyor vs Huey
    python benchmarks/run.py --backend postgres --peers procrastinate
    python benchmarks/run.py --backend redis --peers arq,saq,taskiq,dramatiq,huey,celery,rq
    python benchmarks/run.py --only w1,w2 --repeat 1 --jobs 2000 --json out.json
    python benchmarks/run.py --backend redis --peers none     # conveyor only
    python benchmarks/run.py --backend rabbitmq               # PostgreSQL + RabbitMQ dispatch

Workloads (each repetition of each workload on a fresh store, the systems
interleaved within a repetition; see benchmarks/README.md):

- w1: N no-op jobs enqueued in bulk, then ONE worker process drains them
  (on Redis/PostgreSQL also the server's CPU time in each phase).
- w2: an idle worker; 300 jobs enqueued 10 ms apart; pickup latency percentiles.
- w3: 2,000 jobs of 50 ms I/O wait at concurrency 50; efficiency = ideal / wall.
- scale: the W1 drain with 1, 2 and 4 worker processes (conveyor; peers with
  --scale-peers).
- rss: the conveyor worker's VmRSS idle, after 10,000 and after 100,000 no-op jobs.
- mem (Redis): Redis memory per waiting job (100-byte payload) and per completed job kept.
- ttl (RabbitMQ): jobs sent to the worker queue of a worker that is not running,
  failed ``expired`` through the broker's dead-letter path; seconds from enqueue.

``--backend rabbitmq`` runs conveyor on PostgreSQL with RabbitMQ dispatch and
the peers on RabbitMQ alone (a private broker node, a fresh vhost per run).

Workers are real separate processes: ``python -m conveyor worker APP -c 50`` and
each peer's own worker command.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import conveyor_side, huey_sqlite_side  # noqa: E402
from benchmarks.conveyor_side import ConveyorSide, conveyor_worker_cmd  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    CONCURRENCY,
    ENQUEUE_BATCH,
    PY,
    SCALE_PROCESSES,
    Results,
    fmt,
)
from benchmarks.stores import PostgresStore, RabbitStore, RedisStore, Store  # noqa: E402

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"

# backend -> peer name -> "module:class" (imported only when asked for)
PEERS: dict[str, dict[str, str]] = {
    "sqlite": {"huey": "benchmarks.huey_sqlite_side:HueySide"},
    "postgres": {"procrastinate": "benchmarks.peers.procrastinate_peer:ProcrastinateSide"},
    "redis": {
        "arq": "benchmarks.peers.arq_peer:ArqSide",
        "saq": "benchmarks.peers.saq_peer:SaqSide",
        "taskiq": "benchmarks.peers.taskiq_peer:TaskiqSide",
        "dramatiq": "benchmarks.peers.dramatiq_peer:DramatiqSide",
        "huey": "benchmarks.peers.huey_redis_peer:HueyRedisSide",
        "celery": "benchmarks.peers.celery_peer:CelerySide",
        "rq": "benchmarks.peers.rq_peer:RqSide",
    },
    "rabbitmq": {
        "celery": "benchmarks.peers.celery_rabbitmq_peer:CeleryRabbitSide",
        "dramatiq": "benchmarks.peers.dramatiq_rabbitmq_peer:DramatiqRabbitSide",
    },
}
# The distributions whose versions the facts record, per peer.
DISTS: dict[str, list[str]] = {
    "huey": ["huey"],
    "procrastinate": ["procrastinate", "psycopg"],
    "arq": ["arq"],
    "saq": ["saq"],
    "taskiq": ["taskiq", "taskiq-redis"],
    "dramatiq": ["dramatiq"],
    "celery": ["celery", "kombu"],
    "rq": ["rq"],
}
WORKLOADS = {"w1", "w2", "w3", "scale", "rss", "mem", "ttl"}
CONVEYOR_ONLY = {"rss", "mem", "ttl"}
DEFAULT_ONLY = {
    "sqlite": "w1,w2,w3,rss",
    "postgres": "w1,w2,w3,scale",
    "redis": "w1,w2,w3,scale,mem",
    "rabbitmq": "w1,w2,w3,ttl",
}
SCALE_RUNS = [f"s{k}" for k in SCALE_PROCESSES]  # scale expands into one run per count


# -- the table -----------------------------------------------------------------------
Value = Callable[[Results, str], float | None]
Check = Callable[[float, float | None], bool] | None


def metric(workload: str, key: str) -> Value:
    return lambda results, system: results.median(system, workload, key)


def speedup(processes: int) -> Value:
    def value(results: Results, system: str) -> float | None:
        one = results.median(system, "s1", "drain_per_s")
        many = results.median(system, f"s{processes}", "drain_per_s")
        return many / one if one and many is not None else None

    return value


@dataclass
class Row:
    label: str
    workload: str  # the --only workload it belongs to
    value: Value
    target: str = "(info)"
    check: Check = None  # (conveyor, best peer) -> met?
    higher_is_better: bool = True
    ratio: bool = True  # False: conveyor ÷ best peer means nothing (e.g. counts)


SQLITE_ROWS: list[Row] = [
    Row("W1 enqueue, jobs/s", "w1", metric("w1", "enqueue_per_s"), ">= 100,000",
        lambda c, b: c >= 100_000),
    Row("W1 drain, jobs/s", "w1", metric("w1", "drain_per_s"), ">= 20,000 and >= 10x Huey",
        lambda c, b: c >= 20_000 and (b is None or c >= 10 * b)),
    Row("W1 drain from spawn, jobs/s", "w1", metric("w1", "drain_from_spawn_per_s")),
    Row("W2 pickup p50, ms", "w2", metric("w2", "p50_ms"), "<= 15", lambda c, b: c <= 15, False),
    Row("W2 pickup p95, ms", "w2", metric("w2", "p95_ms"), higher_is_better=False),
    Row("W2 pickup p99, ms", "w2", metric("w2", "p99_ms"), "<= 50", lambda c, b: c <= 50, False),
    Row("W3 wall, s (ideal 2.0)", "w3", metric("w3", "wall_s"), higher_is_better=False),
    Row("W3 efficiency", "w3", metric("w3", "efficiency"), ">= 0.95", lambda c, b: c >= 0.95),
]  # fmt: skip


def server_rows(kind: str) -> list[Row]:
    """The targets of the PostgreSQL, Redis and RabbitMQ issues."""
    if kind == "rabbitmq":
        return rabbit_rows()
    if kind == "postgres":
        enqueue, drain, times = 50_000, 12_000, 20
        p50, p99, eff, scale2 = 2.0, 5.0, 0.95, 1.5
    else:
        enqueue, drain, times = 60_000, 20_000, 10
        p50, p99, eff, scale2 = 1.0, 2.5, 0.97, 1.6
    peer_clause = "" if kind == "postgres" else " and <= best peer"

    def latency(limit: float) -> Check:
        if kind == "postgres":
            return lambda c, b: c <= limit
        return lambda c, b: c <= limit and (b is None or c <= b)

    rows = [
        Row("W1 enqueue, jobs/s", "w1", metric("w1", "enqueue_per_s"), f">= {enqueue:,}",
            lambda c, b: c >= enqueue),
        Row("W1 drain, jobs/s", "w1", metric("w1", "drain_per_s"),
            f">= {drain:,} and >= {times}x best peer",
            lambda c, b: c >= drain and (b is None or c >= times * b)),
        Row("W1 drain from spawn, jobs/s", "w1", metric("w1", "drain_from_spawn_per_s")),
        Row("W1 jobs (peers may run fewer)", "w1", metric("w1", "jobs"), ratio=False),
        Row("W1 server CPU in enqueue, s", "w1", metric("w1", "server_cpu_enqueue_s"),
            higher_is_better=False, ratio=False),
        Row("W1 server CPU in drain, s", "w1", metric("w1", "server_cpu_drain_s"),
            higher_is_better=False, ratio=False),
        Row("W1 server CPU while draining, %", "w1", metric("w1", "server_cpu_drain_pct"),
            higher_is_better=False),
        Row("W1 server CPU per 1k jobs, ms", "w1", metric("w1", "server_cpu_ms_per_1k_jobs"),
            higher_is_better=False),
        Row("W2 pickup p50, ms", "w2", metric("w2", "p50_ms"), f"<= {p50}{peer_clause}",
            latency(p50), False),
        Row("W2 pickup p95, ms", "w2", metric("w2", "p95_ms"), higher_is_better=False),
        Row("W2 pickup p99, ms", "w2", metric("w2", "p99_ms"), f"<= {p99}{peer_clause}",
            latency(p99), False),
        Row("W3 wall, s (ideal 2.0)", "w3", metric("w3", "wall_s"), higher_is_better=False),
        Row("W3 efficiency", "w3", metric("w3", "efficiency"), f">= {eff}",
            lambda c, b: c >= eff),
    ]  # fmt: skip
    for k in SCALE_PROCESSES:
        rows.append(Row(f"drain, {k} process(es), jobs/s", "scale", metric(f"s{k}", "drain_per_s")))
    for k in SCALE_PROCESSES[1:]:
        target, check = ("(info)", None)
        if k == 2:
            target, check = f">= {scale2}x", (lambda c, b: c >= scale2)
        rows.append(Row(f"speed-up {k} processes / 1", "scale", speedup(k), target, check))
    return rows


def rabbit_rows() -> list[Row]:
    """The RabbitMQ dispatch issue's targets (its peers: Celery and Dramatiq on RabbitMQ)."""
    return [
        Row("W1 enqueue, jobs/s", "w1", metric("w1", "enqueue_per_s"), ">= 20,000",
            lambda c, b: c >= 20_000),
        Row("W1 drain, jobs/s", "w1", metric("w1", "drain_per_s"), ">= 10x best peer",
            lambda c, b: b is None or c >= 10 * b),
        Row("W1 drain from spawn, jobs/s", "w1", metric("w1", "drain_from_spawn_per_s")),
        Row("W1 server CPU per 1k jobs, ms", "w1", metric("w1", "server_cpu_ms_per_1k_jobs"),
            higher_is_better=False),
        Row("W2 pickup p50, ms", "w2", metric("w2", "p50_ms"), "<= 2.0 and <= best peer",
            lambda c, b: c <= 2.0 and (b is None or c <= b), False),
        Row("W2 pickup p95, ms", "w2", metric("w2", "p95_ms"), higher_is_better=False),
        Row("W2 pickup p99, ms", "w2", metric("w2", "p99_ms"), "<= 5.0 and <= best peer",
            lambda c, b: c <= 5.0 and (b is None or c <= b), False),
        Row("W3 wall, s (ideal 2.0)", "w3", metric("w3", "wall_s"), higher_is_better=False),
        Row("W3 efficiency", "w3", metric("w3", "efficiency"), ">= 0.95",
            lambda c, b: c >= 0.95),
        Row("TTL -> failed/expired p50, s", "ttl", metric("ttl", "p50_s"),
            higher_is_better=False, ratio=False),
        Row("TTL -> failed/expired p99, s", "ttl", metric("ttl", "p99_s"),
            "<= TTL (1 s) + 2 s", lambda c, b: c <= 3.0, False, ratio=False),
        Row("  of which by the broker's dead letter", "ttl", metric("ttl", "by_broker"),
            ratio=False),
    ]  # fmt: skip


MEM_ROWS: list[Row] = [
    Row("Redis bytes per waiting job (100 B payload)", "mem",
        metric("mem", "bytes_per_waiting_job"), "<= 1,024", lambda c, b: c <= 1024, False),
    Row("Redis bytes per completed job kept", "mem", metric("mem", "bytes_per_completed_job"),
        higher_is_better=False),
]  # fmt: skip

RSS_ROWS: list[Row] = [
    Row("RSS idle, MB", "rss", metric("rss", "idle_mb"), "<= 60", lambda c, b: c <= 60, False),
    Row("RSS after 10k jobs, MB", "rss", metric("rss", "after_10k_mb"), higher_is_better=False),
    Row("RSS after 100k jobs, MB", "rss", metric("rss", "after_100k_mb"), higher_is_better=False),
    Row("RSS growth 10k -> 100k, %", "rss", metric("rss", "growth_pct"), "<= 10",
        lambda c, b: c <= 10, False),
    Row("  of which anon after 10k, MB", "rss", metric("rss", "anon_after_10k_mb")),
    Row("  of which anon after 100k, MB", "rss", metric("rss", "anon_after_100k_mb")),
    Row("  of which file after 100k, MB", "rss", metric("rss", "file_after_100k_mb")),
]  # fmt: skip


def table(results: Results, kind: str, peers: list[str], workloads: list[str]) -> str:
    rows_def = (SQLITE_ROWS if kind == "sqlite" else server_rows(kind)) + MEM_ROWS + RSS_ROWS
    header = ["metric (median)", "conveyor", *peers]
    header += ["conveyor/best peer" if len(peers) > 1 else f"conveyor/{peers[0]}"] if peers else []
    header += ["target", "met"]
    rows = [header]
    for row in rows_def:
        if row.workload not in workloads:
            continue
        c = row.value(results, "conveyor")
        theirs = [row.value(results, p) for p in peers]
        known = [v for v in theirs if v is not None]
        best = (max(known) if row.higher_is_better else min(known)) if known else None
        cells = [row.label, fmt(c), *(fmt(v) for v in theirs)]
        if peers:
            shown = row.ratio and c is not None and best
            cells.append(f"{c / best:.2f}x" if shown else "-")
        met = "-" if row.check is None or c is None else ("yes" if row.check(c, best) else "NO")
        rows.append([*cells, row.target, met])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    left = {0, len(header) - 2}  # the label and the target read left to right
    lines = []
    for n, row_cells in enumerate(rows):
        cells = [
            cell.ljust(widths[i]) if i in left else cell.rjust(widths[i])
            for i, cell in enumerate(row_cells)
        ]
        lines.append("| " + " | ".join(cells) + " |")
        if n == 0:
            rule = ["-" * w if i in left else "-" * (w - 1) + ":" for i, w in enumerate(widths)]
            lines.append("| " + " | ".join(rule) + " |")
    return "\n".join(lines)


# -- the run ---------------------------------------------------------------------------
def load_side(path: str) -> Any:
    module_name, _, class_name = path.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def run_one(
    side_cls: Any,
    store: Store,
    workload: str,
    jobs: int,
    rep: int,
    results: Results,
    keep: bool,
) -> None:
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{side_cls.name}-{workload}-"))
    label = f"{side_cls.name:>13} {workload:<3} #{rep + 1}"
    print(f"  {label} ...", end="", flush=True)
    t0 = time.perf_counter()
    side: Any = None
    try:
        with fresh_for(store, side_cls, f"{side_cls.name}_{workload}") as (url, make):
            try:
                side = make(workdir, url)
                method = getattr(side, workload if workload in WORKLOADS else "scale")
                if workload == "w1":
                    values = method(jobs)
                elif workload == "mem":
                    values = method(store.memory_bytes)
                elif workload in SCALE_RUNS:
                    values = method(jobs, int(workload[1:]))
                else:
                    values = method()
            finally:
                if side is not None:
                    with contextlib.suppress(Exception):
                        side.close()
        results.add(side_cls.name, workload, values)
        shown = ", ".join(f"{k}={fmt(v)}" for k, v in values.items())
        print(f" {time.perf_counter() - t0:5.1f}s  {shown}", flush=True)
    except Exception as exc:
        results.errors.append(f"{label}: {exc}")
        print(f" FAILED: {exc}", flush=True)
    finally:
        if keep:
            print(f"    kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def fresh_for(store: Store, side_cls: Any, label: str) -> Any:
    """A fresh store for one run and how to build the side on it: with RabbitMQ,
    conveyor gets a PostgreSQL database and a vhost, a peer the vhost alone."""
    if isinstance(store, RabbitStore):
        if side_cls is ConveyorSide:
            with store.fresh_pair(label) as (sql, amqp):
                yield (
                    sql,
                    lambda workdir, url: ConveyorSide(
                        workdir, url, store.pair_cpu_seconds, dispatch=amqp
                    ),
                )
            return
        with store.fresh(label) as url:
            yield url, lambda workdir, url: side_cls(workdir, url, store.cpu_seconds)
        return
    with store.fresh(label) as url:
        yield url, lambda workdir, url: side_cls(workdir, url, store.cpu_seconds)


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_facts(store: Store, peers: list[str]) -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    ram_gib = 0.0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_gib = int(line.split()[1]) / 1024 / 1024
    facts: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "backend": store.kind,
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "ram_gib": round(ram_gib, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "loadavg_start": os.getloadavg(),
        "conveyor": version("conveyor"),
        "worker_cmd": " ".join(Path(c).name if c == PY else c for c in conveyor_worker_cmd()),
    }
    if store.kind == "sqlite":
        facts["sqlite"] = sqlite3.sqlite_version
    facts.update(store.facts())
    if store.kind == "rabbitmq":
        facts["aio-pika"] = version("aio-pika")
        facts["pika"] = version("pika")  # Dramatiq's RabbitMQ client
    for peer in peers:
        for dist in DISTS.get(peer, [peer]):
            facts[dist] = version(dist)
    return facts


def open_store(args: argparse.Namespace) -> Store:
    if args.backend == "redis":
        return RedisStore(args.redis_server)
    if args.backend == "postgres":
        return PostgresStore(args.pg_url)
    if args.backend == "rabbitmq":
        return RabbitStore(args.pg_url, args.amqp_url)
    return Store()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--backend", choices=("sqlite", "postgres", "redis", "rabbitmq"), default="sqlite"
    )
    parser.add_argument("--jobs", type=int, default=20_000, help="W1 job count (20,000)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions; medians (3)")
    parser.add_argument(
        "--only", help="workloads: w1,w2,w3,scale,rss,mem (default: w1,w2,w3,rss on SQLite, "
        "w1,w2,w3,scale on PostgreSQL, w1,w2,w3,scale,mem on Redis)"
    )  # fmt: skip
    parser.add_argument(
        "--peers",
        help="comma-separated, or 'none' (default: every peer of the backend: "
        + "; ".join(f"{k}: {','.join(v)}" for k, v in PEERS.items())
        + ")",
    )
    parser.add_argument("--scale-peers", action="store_true", help="run 'scale' for peers too")
    parser.add_argument("--json", type=Path, help="write facts, raw runs and medians here")
    parser.add_argument("--keep", action="store_true", help="keep each run's temp dir")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_PG_URL", DEFAULT_PG_URL),
        help="PostgreSQL admin URL; each run gets a fresh database on that server "
        f"(default $BENCH_PG_URL or {DEFAULT_PG_URL})",
    )
    parser.add_argument(
        "--amqp-url",
        help="rabbitmq: an existing broker to use (a fresh vhost per run; rabbitmqctl must "
        "reach it) instead of a private node the run starts",
    )
    parser.add_argument(
        "--redis-server", default="redis-server", help="the redis-server binary the run starts"
    )
    parser.add_argument(
        "--rss-steps",
        default=",".join(map(str, conveyor_side.RSS_STEPS)),
        help="job counts at which RSS is read (10000,100000); growth compares the first two",
    )
    parser.add_argument(
        "--huey-w1-workers",
        type=int,
        default=huey_sqlite_side.HUEY_W1_WORKERS,
        help="Huey threads in W1",
    )
    parser.add_argument(
        "--peer-w1-jobs",
        default="",
        help="per-peer W1/scale job caps, e.g. rq=2000,procrastinate=5000 (see README)",
    )
    args = parser.parse_args(argv)
    conveyor_side.RSS_STEPS = tuple(int(x) for x in args.rss_steps.split(","))
    steps = conveyor_side.RSS_STEPS
    if len(steps) < 2 or list(steps) != sorted(steps):
        parser.error("--rss-steps: at least two increasing counts")

    workloads = [w.strip() for w in (args.only or DEFAULT_ONLY[args.backend]).split(",")]
    workloads = [w for w in workloads if w]
    unknown = set(workloads) - WORKLOADS
    if unknown:
        parser.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
    if "mem" in workloads and args.backend != "redis":
        parser.error("mem (Redis memory per job) runs on --backend redis only")
    if "ttl" in workloads and args.backend != "rabbitmq":
        parser.error("ttl (worker-queue TTL through the broker) runs on --backend rabbitmq only")
    known = PEERS[args.backend]
    peers = list(known) if args.peers is None else args.peers.split(",")
    peers = [p.strip() for p in peers if p.strip() and p.strip() != "none"]
    if set(peers) - set(known):
        parser.error(f"--peers on {args.backend}: choose from {', '.join(known)} (or 'none')")
    caps: dict[str, int] = {}
    for item in filter(None, args.peer_w1_jobs.split(",")):
        peer, _, cap = item.partition("=")
        caps[peer.strip()] = int(cap)

    sides: list[Any] = [ConveyorSide]
    for peer in peers:
        try:
            side = load_side(known[peer])
        except ImportError as exc:
            parser.error(f"peer {peer}: {exc} (pip install -e '.[bench]'; arq: --no-deps)")
        if peer in caps:
            side.w1_jobs_cap = caps[peer]
        if hasattr(side, "w1_workers"):
            side.w1_workers = args.huey_w1_workers
        sides.append(side)

    runs: list[str] = []
    for workload in workloads:
        runs += SCALE_RUNS if workload == "scale" else [workload]

    store = open_store(args)
    try:
        facts = machine_facts(store, peers)
        print("machine: " + ", ".join(f"{k}={v}" for k, v in facts.items()), flush=True)
        results = Results()
        for rep in range(args.repeat):
            print(f"repetition {rep + 1}/{args.repeat}", flush=True)
            for run in runs:
                for side in sides:
                    if run in CONVEYOR_ONLY and side is not ConveyorSide:
                        continue
                    if run in SCALE_RUNS and side is not ConveyorSide and not args.scale_peers:
                        continue
                    run_one(side, store, run, args.jobs, rep, results, args.keep)
        facts["loadavg_end"] = os.getloadavg()
    finally:
        store.close()

    print()
    print(table(results, args.backend, peers, workloads))
    if results.errors:
        print("\nerrors:")
        for error in results.errors:
            print("  " + error.splitlines()[0])
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        config: dict[str, Any] = {
            "backend": args.backend,
            "jobs": args.jobs,
            "repeat": args.repeat,
            "workloads": workloads,
            "concurrency": CONCURRENCY,
            "enqueue_batch": ENQUEUE_BATCH,
            "peer_settings": {s.name: getattr(s, "settings", {}) for s in sides[1:]},
            "peer_w1_jobs_caps": {s.name: getattr(s, "w1_jobs_cap", None) for s in sides[1:]},
        }
        if args.backend == "sqlite":
            config["huey_w1_workers"] = args.huey_w1_workers
            config["huey_workers"] = huey_sqlite_side.HUEY_WORKERS
        args.json.write_text(
            json.dumps(
                {
                    "facts": facts,
                    "config": config,
                    "medians": results.medians(),
                    "runs": results.raw,
                    "errors": results.errors,
                },
                indent=2,
            )
        )
        print(f"\nwrote {args.json}")
    return 1 if results.errors else 0


if __name__ == "__main__":
    sys.exit(main())

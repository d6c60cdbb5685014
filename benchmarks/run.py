#!/usr/bin/env python3
"""conveyor vs Huey, both on SQLite, in one run. See benchmarks/README.md.

    python benchmarks/run.py                      # everything, 3 repetitions, medians
    python benchmarks/run.py --only w1,w2 --repeat 1 --json out.json
    python benchmarks/run.py --peers none         # conveyor only

Workloads (each repetition in a fresh temp dir, the two systems interleaved):

- w1: N no-op jobs enqueued in bulk, then ONE worker process drains them.
- w2: an idle worker; 300 jobs enqueued 10 ms apart; pickup latency percentiles.
- w3: 2,000 jobs of 50 ms I/O wait at concurrency 50; efficiency = ideal / wall.
- rss: the conveyor worker's VmRSS idle, after 10,000 and after 100,000 no-op jobs.

Workers are real separate processes: ``python -m conveyor worker APP -c 50`` (or
benchmarks/worker_main.py while the CLI does not exist) and Huey's own consumer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PY = sys.executable
CONCURRENCY = 50
ENQUEUE_BATCH = 5_000
W2_JOBS = 300
W2_INTERVAL = 0.010
W3_JOBS = 2_000
W3_SLEEP = 0.05
RSS_STEPS: tuple[int, ...] = (10_000, 100_000)
IDLE_SECONDS = 2.0
DEADLINE = 600.0  # longest wait for any one phase before the workload is called failed

# Huey: its consumer with thread workers (the documented choice for I/O-bound
# tasks without gevent). W1 uses the worker count that drained fastest here
# (see README); W2 and W3 use the same concurrency as conveyor.
HUEY_W1_WORKERS = 1
HUEY_WORKERS = CONCURRENCY

CONVEYOR_APP = "benchmarks.apps.conveyor_app:app"
HUEY_APP = "benchmarks.apps.huey_app.huey"


class BenchError(RuntimeError):
    pass


# -- processes ---------------------------------------------------------------------
@dataclass
class Proc:
    """A worker process we started: its log, its RSS, and a clean stop."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    started: float
    stop_signal: int = signal.SIGTERM

    @classmethod
    def start(
        cls, name: str, cmd: list[str], env: dict[str, str], log: Path, stop_signal: int
    ) -> Proc:
        out = log.open("wb")
        started = time.time()
        popen = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        return cls(name, popen, log, started, stop_signal)

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            raise BenchError(f"{self.name} exited with {self.popen.returncode}:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def worker_pid(self) -> int:
        """The process that runs jobs: ours, or its only child if it forked one."""
        pid = self.popen.pid
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            children = []
        return int(children[0]) if len(children) == 1 else pid

    def rss_mb(self) -> dict[str, float]:
        """VmRSS, its anonymous and file-backed parts, and VmHWM (peak), in MiB."""
        fields: dict[str, float] = {}
        for line in Path(f"/proc/{self.worker_pid()}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                fields[key] = int(value.split()[0]) / 1024
        return fields

    def stop(self, timeout: float = 30.0) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(self.stop_signal)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                print(f"  ! {self.name} did not stop in {timeout:.0f}s: killing it", flush=True)
                self.popen.kill()
                self.popen.wait()


@contextlib.contextmanager
def running(proc: Proc) -> Iterator[Proc]:
    try:
        yield proc
    finally:
        proc.stop()


def base_env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env["TMPDIR"] = str(workdir)
    return env


def wait_until(
    what: str, check: Callable[[], bool], proc: Proc | None, timeout: float = DEADLINE
) -> float:
    """Poll ``check`` every 10 ms; returns the time it first held."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return time.time()
        if proc is not None:
            proc.check_alive()
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.01)


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


# -- conveyor ------------------------------------------------------------------------
_WORKER_CMD: list[str] | None = None


def conveyor_worker_cmd() -> list[str]:
    """``python -m conveyor worker`` when the CLI works, else benchmarks/worker_main.py."""
    global _WORKER_CMD
    if _WORKER_CMD is None:
        probe = subprocess.run(
            [PY, "-m", "conveyor", "worker", "--help"],
            cwd=ROOT,
            capture_output=True,
            check=False,
        )
        if probe.returncode == 0:
            _WORKER_CMD = [PY, "-m", "conveyor", "worker", CONVEYOR_APP, "-c", str(CONCURRENCY)]
            # Minimal logging, like Huey's -q: at INFO the CLI logs one line per job.
            _WORKER_CMD += ["--log-level", "warning"]
        else:
            _WORKER_CMD = [PY, "-m", "benchmarks.worker_main", CONVEYOR_APP, "-c", str(CONCURRENCY)]
    return _WORKER_CMD


class ConveyorSide:
    name = "conveyor"

    def __init__(self, workdir: Path) -> None:
        from conveyor import Conveyor

        self.workdir = workdir
        self.url = f"sqlite:///{workdir / 'conveyor.db'}"
        self.app = Conveyor(self.url)
        self.loop = asyncio.new_event_loop()
        self.run(self.app.connect())

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.run(self.app.close())
        self.loop.close()

    def start_worker(self) -> Proc:
        env = base_env(self.workdir)
        env["CONVEYOR_URL"] = self.url
        return Proc.start(
            "conveyor worker",
            conveyor_worker_cmd(),
            env,
            self.workdir / "worker.log",
            signal.SIGTERM,
        )

    def enqueue_bulk(self, task: str, n: int) -> float:
        """Enqueue ``n`` jobs with ``enqueue_many`` in batches; returns seconds taken."""

        async def go() -> float:
            t0 = time.perf_counter()
            left = n
            while left:
                size = min(ENQUEUE_BATCH, left)
                await self.app.enqueue_many([(task, None)] * size)
                left -= size
            return time.perf_counter() - t0

        return float(self.run(go()))

    def count(self, state: str) -> int:
        return int(self.run(self.app.count_jobs(state)))

    def wait_done(self, total: int, proc: Proc) -> float:
        def check() -> bool:
            failed = self.count("failed")
            if failed:
                raise BenchError(f"{failed} job(s) failed:\n{proc.tail()}")
            return self.count("completed") >= total

        return wait_until(f"{total} completed jobs", check, proc)

    def window(self) -> tuple[float, float]:
        """(first started_at, last finished_at) over the completed jobs."""

        async def go() -> tuple[float, float]:
            first, last, offset = float("inf"), 0.0, 0
            while True:
                jobs = await self.app.list_jobs("completed", limit=5_000, offset=offset)
                for job in jobs:
                    first = min(first, job.started_at or first)
                    last = max(last, job.finished_at or 0.0)
                if len(jobs) < 5_000:
                    return first, last
                offset += len(jobs)

        first, last = self.run(go())
        return float(first), float(last)

    def wait_ready(self, proc: Proc) -> None:
        """The worker is up: it heartbeats, and a first job went through."""

        async def registered() -> bool:
            return bool(await self.app.workers())

        wait_until("the worker's heartbeat", lambda: self.run(registered()), proc, 120)
        self.enqueue_bulk("bench.noop", 1)
        self.wait_done(1, proc)

    # workloads
    def w1(self, n: int) -> dict[str, float]:
        enqueue_s = self.enqueue_bulk("bench.noop", n)
        with running(self.start_worker()) as proc:
            spawned = proc.started
            seen = self.wait_done(n, proc)
        first, last = self.window()
        return {
            "enqueue_per_s": n / enqueue_s,
            "drain_per_s": n / (last - first),
            "drain_from_spawn_per_s": n / (seen - spawned),
        }

    def w2(self) -> dict[str, float]:
        with running(self.start_worker()) as proc:
            self.wait_ready(proc)
            time.sleep(IDLE_SECONDS)

            async def produce() -> dict[str, float]:
                sent: dict[str, float] = {}
                t0 = time.perf_counter()
                for i in range(W2_JOBS):
                    pause = t0 + i * W2_INTERVAL - time.perf_counter()
                    if pause > 0:
                        await asyncio.sleep(pause)
                    at = time.time()
                    job = await self.app.enqueue("bench.stamp", {"i": i})
                    sent[job.id] = at
                return sent

            sent = self.run(produce())
            self.wait_done(W2_JOBS + 1, proc)

        async def started() -> dict[str, float]:
            jobs = await self.app.list_jobs("completed", task="bench.stamp", limit=W2_JOBS)
            return {j.id: float(j.result) for j in jobs if isinstance(j.result, int | float)}

        stamps = self.run(started())
        return latency_stats([stamps[i] - sent[i] for i in sent if i in stamps], W2_JOBS)

    def w3(self) -> dict[str, float]:
        self.enqueue_bulk("bench.sleep", W3_JOBS)
        with running(self.start_worker()) as proc:
            self.wait_done(W3_JOBS, proc)
        first, last = self.window()
        return w3_stats(last - first)

    def rss(self) -> dict[str, float]:
        out: dict[str, float] = {}
        with running(self.start_worker()) as proc:
            self.wait_ready(proc)
            time.sleep(IDLE_SECONDS)
            mem = proc.rss_mb()
            out["idle_mb"] = mem["VmRSS"]
            out["anon_idle_mb"] = mem["RssAnon"]
            done = 1  # the warm-up job
            for step in RSS_STEPS:
                self.enqueue_bulk("bench.noop", step - (done - 1))
                done = step + 1
                self.wait_done(done, proc)
                time.sleep(1.0)
                mem = proc.rss_mb()
                tag = f"{step // 1000}k"
                out[f"after_{tag}_mb"] = mem["VmRSS"]
                out[f"anon_after_{tag}_mb"] = mem["RssAnon"]
                out[f"file_after_{tag}_mb"] = mem["RssFile"]
                out[f"peak_after_{tag}_mb"] = mem["VmHWM"]
            db_bytes = sum(f.stat().st_size for f in self.workdir.glob("conveyor.db*"))
            out["db_mb"] = db_bytes / (1 << 20)
        a, b = (out[f"after_{s // 1000}k_mb"] for s in RSS_STEPS[:2])
        out["growth_pct"] = (b / a - 1) * 100
        return out


# -- Huey ------------------------------------------------------------------------------
class HueySide:
    name = "huey"

    def __init__(self, workdir: Path) -> None:
        from benchmarks.apps.huey_app import build

        self.workdir = workdir
        self.db = workdir / "huey.db"
        self.huey, self.tasks = build(str(self.db))

    def close(self) -> None:
        self.huey.storage.close()

    def start_consumer(self, workers: int, expect: int = 0) -> tuple[Proc, Path]:
        done = self.workdir / f"huey-done-{time.monotonic_ns()}.json"
        env = base_env(self.workdir)
        env.update(BENCH_HUEY_DB=str(self.db), BENCH_HUEY_DONE=str(done), BENCH_EXPECT=str(expect))
        cmd = [PY, "-m", "huey.bin.huey_consumer", HUEY_APP, "-k", "thread"]
        cmd += ["-w", str(workers), "-q"]
        proc = Proc.start("huey consumer", cmd, env, self.workdir / "consumer.log", signal.SIGINT)
        return proc, done

    def enqueue_bulk(self, task: str, n: int) -> float:
        """Huey has no bulk enqueue: ``Task.map`` (a loop of enqueues) is its fastest way."""
        t0 = time.perf_counter()
        self.tasks[task].map([()] * n)
        return time.perf_counter() - t0

    @staticmethod
    def read_done(done: Path, proc: Proc) -> dict[str, Any]:
        wait_until(f"{done.name}", done.exists, proc)
        data: dict[str, Any] = json.loads(done.read_text())
        if data["errors"]:
            raise BenchError(f"{data['errors']} Huey task(s) failed:\n{proc.tail()}")
        return data

    def w1(self, n: int) -> dict[str, float]:
        enqueue_s = self.enqueue_bulk("noop", n)
        proc, done = self.start_consumer(HUEY_W1_WORKERS, expect=n)
        with running(proc):
            data = self.read_done(done, proc)
            seen = time.time()
        return {
            "enqueue_per_s": n / enqueue_s,
            "drain_per_s": n / (data["last_done"] - data["first_start"]),
            "drain_from_spawn_per_s": n / (seen - proc.started),
        }

    def w2(self) -> dict[str, float]:
        proc, _ = self.start_consumer(HUEY_WORKERS)
        with running(proc):
            self.tasks["stamp"](-1).get(blocking=True, timeout=120)  # ready
            time.sleep(IDLE_SECONDS)
            sent: list[tuple[Any, float]] = []
            t0 = time.perf_counter()
            for i in range(W2_JOBS):
                pause = t0 + i * W2_INTERVAL - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                at = time.time()
                sent.append((self.tasks["stamp"](i), at))
            latencies = []
            for result, at in sent:
                started = result.get(blocking=True, timeout=120)
                latencies.append(started - at)
        return latency_stats(latencies, W2_JOBS)

    def w3(self) -> dict[str, float]:
        self.enqueue_bulk("sleep", W3_JOBS)
        proc, done = self.start_consumer(HUEY_WORKERS, expect=W3_JOBS)
        with running(proc):
            data = self.read_done(done, proc)
        return w3_stats(data["last_done"] - data["first_start"])


def latency_stats(latencies: list[float], expected: int) -> dict[str, float]:
    if len(latencies) != expected:
        raise BenchError(f"got {len(latencies)} of {expected} pickup times")
    ms = [x * 1000 for x in latencies]
    return {
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms),
    }


def w3_stats(wall: float) -> dict[str, float]:
    ideal = W3_JOBS * W3_SLEEP / CONCURRENCY
    return {"wall_s": wall, "efficiency": ideal / wall}


# -- the run ---------------------------------------------------------------------------
@dataclass
class Results:
    raw: dict[str, dict[str, list[dict[str, float]]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add(self, system: str, workload: str, values: dict[str, float]) -> None:
        self.raw.setdefault(system, {}).setdefault(workload, []).append(values)

    def median(self, system: str, workload: str, metric: str) -> float | None:
        runs = self.raw.get(system, {}).get(workload, [])
        values = [r[metric] for r in runs if metric in r]
        return statistics.median(values) if values else None

    def medians(self) -> dict[str, dict[str, dict[str, float]]]:
        out: dict[str, dict[str, dict[str, float]]] = {}
        for system, workloads in self.raw.items():
            for workload, runs in workloads.items():
                metrics = {k for r in runs for k in r}
                out.setdefault(system, {})[workload] = {
                    m: statistics.median(r[m] for r in runs if m in r) for m in sorted(metrics)
                }
        return out


def run_one(
    side_cls: type[ConveyorSide] | type[HueySide],
    workload: str,
    jobs: int,
    rep: int,
    results: Results,
    keep: bool,
) -> None:
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{side_cls.name}-{workload}-"))
    label = f"{side_cls.name:>8} {workload:<3} #{rep + 1}"
    print(f"  {label} ...", end="", flush=True)
    t0 = time.perf_counter()
    side: Any = None
    try:
        side = side_cls(workdir)
        method = getattr(side, workload)
        values = method(jobs) if workload == "w1" else method()
        results.add(side_cls.name, workload, values)
        shown = ", ".join(f"{k}={fmt(v)}" for k, v in values.items())
        print(f" {time.perf_counter() - t0:5.1f}s  {shown}", flush=True)
    except Exception as exc:
        results.errors.append(f"{label}: {exc}")
        print(f" FAILED: {exc}", flush=True)
    finally:
        if side is not None:
            with contextlib.suppress(Exception):
                side.close()
        if keep:
            print(f"    kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def machine_facts() -> dict[str, Any]:
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

    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "ram_gib": round(ram_gib, 1),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "conveyor": version("conveyor"),
        "huey": version("huey"),
        "kernel": platform.release(),
        "loadavg_start": os.getloadavg(),
        "worker_cmd": " ".join(Path(c).name if c == PY else c for c in conveyor_worker_cmd()),
    }


# metric -> (label, workload, key, target text, check(conveyor, huey) or None)
Check = Callable[[float, float | None], bool] | None
ROWS: list[tuple[str, str, str, str, Check]] = [
    ("W1 enqueue, jobs/s", "w1", "enqueue_per_s", ">= 100,000", lambda c, h: c >= 100_000),
    (
        "W1 drain, jobs/s",
        "w1",
        "drain_per_s",
        ">= 20,000 and >= 10x Huey",
        lambda c, h: c >= 20_000 and (h is None or c >= 10 * h),
    ),
    ("W1 drain from spawn, jobs/s", "w1", "drain_from_spawn_per_s", "(info)", None),
    ("W2 pickup p50, ms", "w2", "p50_ms", "<= 15", lambda c, h: c <= 15),
    ("W2 pickup p95, ms", "w2", "p95_ms", "(info)", None),
    ("W2 pickup p99, ms", "w2", "p99_ms", "<= 50", lambda c, h: c <= 50),
    ("W3 wall, s (ideal 2.0)", "w3", "wall_s", "(info)", None),
    ("W3 efficiency", "w3", "efficiency", ">= 0.95", lambda c, h: c >= 0.95),
    ("RSS idle, MB", "rss", "idle_mb", "<= 60", lambda c, h: c <= 60),
    ("RSS after 10k jobs, MB", "rss", "after_10k_mb", "(info)", None),
    ("RSS after 100k jobs, MB", "rss", "after_100k_mb", "(info)", None),
    ("RSS growth 10k -> 100k, %", "rss", "growth_pct", "<= 10", lambda c, h: c <= 10),
    ("  of which anon after 10k, MB", "rss", "anon_after_10k_mb", "(info)", None),
    ("  of which anon after 100k, MB", "rss", "anon_after_100k_mb", "(info)", None),
    ("  of which file after 100k, MB", "rss", "file_after_100k_mb", "(info)", None),
]


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def table(results: Results, workloads: list[str]) -> str:
    header = ["metric (median)", "conveyor", "huey", "conveyor/huey", "target", "met"]
    rows = [header]
    for label, workload, key, target, check in ROWS:
        if workload not in workloads:
            continue
        c = results.median("conveyor", workload, key)
        h = results.median("huey", workload, key)
        ratio = f"{c / h:.2f}x" if c is not None and h else "-"
        met = "-" if check is None or c is None else ("yes" if check(c, h) else "NO")
        rows.append([label, fmt(c), fmt(h), ratio, target, met])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [
            cell.ljust(widths[i]) if i in (0, 4) else cell.rjust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("| " + " | ".join(cells) + " |")
        if n == 0:
            lines.append(
                "| "
                + " | ".join(
                    "-" * widths[i] if i in (0, 4) else "-" * (widths[i] - 1) + ":"
                    for i in range(len(header))
                )
                + " |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    global RSS_STEPS, HUEY_W1_WORKERS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="W1 job count (20,000)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions; medians (3)")
    parser.add_argument("--only", default="w1,w2,w3,rss", help="workloads (w1,w2,w3,rss)")
    parser.add_argument("--peers", default="huey", help="'huey' or 'none'")
    parser.add_argument("--json", type=Path, help="write facts, raw runs and medians here")
    parser.add_argument("--keep", action="store_true", help="keep each run's temp dir")
    parser.add_argument(
        "--rss-steps",
        default=",".join(map(str, RSS_STEPS)),
        help="job counts at which RSS is read (10000,100000); growth compares the first two",
    )
    parser.add_argument(
        "--huey-w1-workers", type=int, default=HUEY_W1_WORKERS, help="Huey threads in W1"
    )
    args = parser.parse_args(argv)
    RSS_STEPS = tuple(int(x) for x in args.rss_steps.split(","))
    HUEY_W1_WORKERS = args.huey_w1_workers
    if len(RSS_STEPS) < 2 or list(RSS_STEPS) != sorted(RSS_STEPS):
        parser.error("--rss-steps: at least two increasing counts")

    workloads = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = set(workloads) - {"w1", "w2", "w3", "rss"}
    if unknown:
        parser.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
    peers = [p for p in args.peers.split(",") if p and p != "none"]
    if set(peers) - {"huey"}:
        parser.error("--peers: only 'huey' (or 'none') is supported")

    facts = machine_facts()
    print("machine: " + ", ".join(f"{k}={v}" for k, v in facts.items()), flush=True)
    results = Results()
    sides: list[type[ConveyorSide] | type[HueySide]] = [ConveyorSide]
    if "huey" in peers:
        sides.append(HueySide)
    for rep in range(args.repeat):
        print(f"repetition {rep + 1}/{args.repeat}", flush=True)
        for workload in workloads:
            for side in sides:
                if workload == "rss" and side is HueySide:
                    continue
                run_one(side, workload, args.jobs, rep, results, args.keep)
    facts["loadavg_end"] = os.getloadavg()

    print()
    print(table(results, workloads))
    if results.errors:
        print("\nerrors:")
        for error in results.errors:
            print("  " + error.splitlines()[0])
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "facts": facts,
                    "config": {
                        "jobs": args.jobs,
                        "repeat": args.repeat,
                        "concurrency": CONCURRENCY,
                        "enqueue_batch": ENQUEUE_BATCH,
                        "huey_w1_workers": HUEY_W1_WORKERS,
                        "huey_workers": HUEY_WORKERS,
                    },
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

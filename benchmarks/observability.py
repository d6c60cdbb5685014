"""What tracing, worker metrics and the Django Tasks backend cost, on SQLite.

    python -m benchmarks.observability                    # everything, 3 pairs each
    python -m benchmarks.observability --only tracing,scrape --pairs 3 --jobs 20000
    python -m benchmarks.observability --json observability.json

Each comparison is run as pairs of short runs, A then B, then B then A in the
next pair (alternating, so a noisy moment on a shared host hurts both sides),
and the table shows the median of each side and the median of the per-pair
ratios. Every run is a fresh child process (``--child``) with a fresh SQLite
file, so one run's tracer provider or Django setup never leaks into the next.

- ``tracing``: W1 drain, opentelemetry-api installed with no provider (``api``)
  against not importable (``absent``);
- ``sdk``: W1 drain with the SDK, a BatchSpanProcessor and an exporter that
  drops spans (``sdk``), against ``absent``;
- ``sampled``: the same with 1% of traces kept (``sdk-sampled``), against ``absent``;
- ``metrics``: W1 drain with ``--metrics-port`` (``metrics``) against without (``api``);
- ``scrape``: ``/metrics`` response times, scraped every 10 ms, of a worker
  draining ``--scrape-jobs`` jobs, each run followed by one of an idle worker
  (the host's own share);
- ``django``: W2 pickup against a Django worker, jobs enqueued by Django's
  ``.enqueue()`` (``django``) against the same job by ``app.enqueue`` (``native``);
- ``django-sync``: the same ``django`` against ``app.enqueue_sync`` of the same job
  (``sync``: what a sync caller such as a Django view would use without Django);
- ``django-e2e``: the same ``django`` against benchmarks/run.py's plain W2
  (``plain``: an async task on its own worker).

Drains also report the worker's own CPU time per job (all its threads, from
/proc/PID/task/*/schedstat), which a busy neighbour disturbs far less than the
wall-clock rate; its ratio is B's over A's, read like a throughput ratio.

W1 and W2 are those of benchmarks/run.py (a no-op job drained by one worker
with ``-c 50``; jobs enqueued every 10 ms to an idle worker, pickup = handler
start - enqueue call).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    CONCURRENCY,
    IDLE_SECONDS,
    PY,
    ROOT,
    W2_INTERVAL,
    W2_JOBS,
    BenchError,
    Proc,
    base_env,
    fmt,
    latency_stats,
    percentile,
    running,
)

TRACED_APP = "benchmarks.apps.traced_app:app"
DJANGO_APP = "conveyor.contrib.django.worker:app"
DJANGO_SETTINGS = "benchmarks.django_site.settings"
DJANGO_TASK_PATH = "benchmarks.django_site.tasks.stamp"
SCRAPE_EVERY = 0.01

#: comparison -> (A, B, the metric compared)
PAIRS: dict[str, tuple[str, str, str]] = {
    "tracing": ("api", "absent", "drain_per_s"),
    "sdk": ("sdk", "absent", "drain_per_s"),
    "sampled": ("sdk-sampled", "absent", "drain_per_s"),
    "metrics": ("metrics", "api", "drain_per_s"),
    "django": ("django", "native", "p50_ms"),
    "django-sync": ("django", "sync", "p50_ms"),
    "django-e2e": ("django", "plain", "p50_ms"),
}


# -- the child: one measurement ----------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def worker_cmd(app: str, metrics_port: int | None = None) -> list[str]:
    cmd = [PY, "-m", "conveyor", "worker", app, "-c", str(CONCURRENCY), "--log-level", "warning"]
    if metrics_port is not None:
        cmd += ["--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1"]
    return cmd


def drain_side(workdir: Path, mode: str, metrics_port: int | None) -> Any:
    """A ConveyorSide whose worker runs the traced app in ``mode``."""
    from benchmarks.conveyor_side import ConveyorSide

    class Side(ConveyorSide):
        def start_worker(self, index: int = 0) -> Proc:
            env = base_env(self.workdir)
            env["CONVEYOR_URL"] = self.url
            return Proc.start(
                "conveyor worker",
                worker_cmd(TRACED_APP, metrics_port),
                env,
                self.workdir / "worker.log",
                signal.SIGTERM,
            )

    return Side(workdir)


def child_drain(workdir: Path, mode: str, jobs: int) -> dict[str, float]:
    tracing = "api" if mode == "metrics" else mode
    os.environ["BENCH_TRACING"] = tracing
    import benchmarks.apps.traced_app  # noqa: F401  # the producer traces as the worker does

    side = drain_side(workdir, tracing, free_port() if mode == "metrics" else None)
    try:
        return timed_drain(side, jobs)
    finally:
        side.close()


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid`` so far (schedstat: nanoseconds, unlike
    the 10 ms ticks of /proc/PID/stat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):  # a thread that just ended
            continue
    return total / 1e9


def timed_drain(side: Any, jobs: int) -> dict[str, float]:
    """W1's drain (as ConveyorSide.drain), plus the worker's own CPU time per job
    between the first completed job seen and the last: on a shared host the
    wall-clock rate follows the neighbours' load, the CPU per job much less."""
    side.enqueue_bulk("bench.noop", jobs)
    proc = side.start_worker()
    start: tuple[int, float] | None = None
    with running(proc):
        while True:
            done = side.count("completed")
            cpu = cpu_seconds(proc.popen.pid)
            if start is None and done > 0:
                start = (done, cpu)
            if done >= jobs:
                break
            proc.check_alive()
            time.sleep(0.01)
    first, last = side.window()
    assert start is not None
    counted = done - start[0]
    return {
        "drain_per_s": jobs / (last - first),
        "worker_cpu_us_per_job": (cpu - start[1]) / counted * 1e6 if counted else float("nan"),
        "jobs_cpu_counted": float(counted),
    }


def child_scrape(workdir: Path, jobs: int) -> dict[str, float]:
    """Scrapes while a worker drains ``jobs`` jobs; with 0, as many scrapes of an
    idle worker (the host's share of the response time)."""
    os.environ["BENCH_TRACING"] = "api"
    port = free_port()
    side = drain_side(workdir, "api", port)
    times: list[float] = []
    stop = threading.Event()
    if jobs == 0:
        return scrape_idle(side, port)

    def scrape() -> None:
        url = f"http://127.0.0.1:{port}/metrics"
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    response.read()
            except OSError:  # not listening yet
                time.sleep(0.05)
                continue
            if not stop.is_set():
                times.append(time.perf_counter() - t0)
            time.sleep(SCRAPE_EVERY)

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    try:
        drained = side.drain(jobs, 1)
    finally:
        stop.set()
        scraper.join(10)
        side.close()
    if not times:
        raise BenchError("no scrape answered while the worker ran")
    ms = [t * 1000 for t in times]
    return {
        "scrapes": float(len(ms)),
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms),
        "drain_per_s": drained["drain_per_s"],
    }


def scrape_idle(side: Any, port: int, count: int = 250) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/metrics"
    times: list[float] = []
    try:
        with running(side.start_worker()) as proc:
            while len(times) < count:
                proc.check_alive()
                t0 = time.perf_counter()
                try:
                    with urllib.request.urlopen(url, timeout=5) as response:
                        response.read()
                except OSError:  # not listening yet
                    time.sleep(0.05)
                    continue
                times.append(time.perf_counter() - t0)
                time.sleep(SCRAPE_EVERY)
    finally:
        side.close()
    ms = [t * 1000 for t in times]
    return {
        "scrapes": float(len(ms)),
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms),
    }


def child_pickup(workdir: Path, mode: str) -> dict[str, float]:
    """W2 against a Django worker, or (``mode="plain"``) benchmarks/run.py's own W2."""
    if mode == "plain":
        from benchmarks.conveyor_side import ConveyorSide

        side = ConveyorSide(workdir)
        try:
            return side.w2()
        finally:
            side.close()
    return django_pickup(workdir, mode)


def django_pickup(workdir: Path, mode: str) -> dict[str, float]:
    """W2 against a Django worker: jobs of one Django task, enqueued through
    Django (``mode="django"``) or as the same conveyor job by ``app.enqueue``."""
    from conveyor import Conveyor

    url = f"sqlite:///{workdir / 'conveyor.db'}"
    os.environ["CONVEYOR_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = DJANGO_SETTINGS
    env = base_env(workdir)
    proc = Proc.start(
        "django worker", worker_cmd(DJANGO_APP), env, workdir / "worker.log", signal.SIGTERM
    )
    app = Conveyor(url)
    loop = asyncio.new_event_loop()
    run = loop.run_until_complete
    if mode == "django":
        import django

        django.setup()
        from benchmarks.django_site.tasks import stamp

        def enqueue(i: int) -> str:
            return str(stamp.enqueue(i=i).id)

    elif mode == "sync":  # the same job from a sync caller, through the app's loop thread

        def enqueue(i: int) -> str:
            payload = {"task": DJANGO_TASK_PATH, "args": [], "kwargs": {"i": i}}
            return app.enqueue_sync("django.task", payload).id

    else:

        def enqueue(i: int) -> str:
            payload = {"task": DJANGO_TASK_PATH, "args": [], "kwargs": {"i": i}}
            return run(app.enqueue("django.task", payload)).id

    def completed() -> int:
        return int(run(app.count_jobs("completed")))

    def wait_for(what: str, check: Any) -> None:
        deadline = time.monotonic() + 120
        while not check():
            proc.check_alive()
            if time.monotonic() > deadline:
                raise BenchError(f"timed out waiting for {what}:\n{proc.tail()}")
            time.sleep(0.01)

    try:
        with running(proc):
            wait_for("the worker's heartbeat", lambda: bool(run(app.workers())))
            enqueue(-1)
            wait_for("a first job", lambda: completed() >= 1)
            time.sleep(IDLE_SECONDS)
            sent: dict[str, float] = {}
            t0 = time.perf_counter()
            for i in range(W2_JOBS):
                pause = t0 + i * W2_INTERVAL - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                at = time.time()
                sent[enqueue(i)] = at
            wait_for("every job", lambda: completed() >= W2_JOBS + 1)
        jobs = run(app.list_jobs("completed", limit=W2_JOBS + 1))
        started = {j.id: float(j.result) for j in jobs if isinstance(j.result, int | float)}
        return latency_stats([started[i] - sent[i] for i in sent if i in started], W2_JOBS)
    finally:
        run(app.close())
        loop.close()


def child(kind: str, mode: str, jobs: int) -> None:
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-obs-{kind}-{mode}-"))
    try:
        if kind == "drain":
            values = child_drain(workdir, mode, jobs)
        elif kind == "scrape":
            values = child_scrape(workdir, jobs)
        else:
            values = child_pickup(workdir, mode)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(values), flush=True)


# -- the parent: pairs, alternated ---------------------------------------------------------
def measure(kind: str, mode: str, jobs: int) -> dict[str, float]:
    cmd = [PY, "-m", "benchmarks.observability", "--child", kind, "--mode", mode]
    cmd += ["--jobs", str(jobs)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    print(f"  {kind:<6} {mode:<11} ...", end="", flush=True)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchError(f"{kind} {mode} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    values: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    shown = ", ".join(f"{k}={fmt(v)}" for k, v in values.items())
    print(f" {time.perf_counter() - t0:5.1f}s  {shown}", flush=True)
    return values


def compare(name: str, pairs: int, jobs: int) -> dict[str, Any]:
    a, b, metric = PAIRS[name]
    kind = "pickup" if name.startswith("django") else "drain"
    runs: dict[str, list[dict[str, float]]] = {a: [], b: []}
    ratios: list[float] = []
    for k in range(pairs):
        order = (a, b) if k % 2 == 0 else (b, a)
        got = {mode: measure(kind, mode, jobs) for mode in order}
        for mode in order:
            runs[mode].append(got[mode])
        ratios.append(got[a][metric] / got[b][metric])
    out: dict[str, Any] = {
        "a": a,
        "b": b,
        "metric": metric,
        "runs": runs,
        "median_a": statistics.median(r[metric] for r in runs[a]),
        "median_b": statistics.median(r[metric] for r in runs[b]),
        "ratios": ratios,
        "median_ratio": statistics.median(ratios),
    }
    if kind == "drain":
        # B's CPU per job over A's: like a throughput ratio, below 1 means A costs more.
        cpu = "worker_cpu_us_per_job"
        out["cpu_ratios"] = [rb[cpu] / ra[cpu] for ra, rb in zip(runs[a], runs[b], strict=True)]
        out["median_cpu_a"] = statistics.median(r[cpu] for r in runs[a])
        out["median_cpu_b"] = statistics.median(r[cpu] for r in runs[b])
        out["median_cpu_ratio"] = statistics.median(out["cpu_ratios"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", default="tracing,sdk,sampled,metrics,scrape,django,django-sync,django-e2e"
    )
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000, help="W1 jobs per drain")
    parser.add_argument("--scrape-jobs", type=int, default=100_000)
    parser.add_argument("--scrape-runs", type=int, default=3)
    parser.add_argument("--json", help="write every run and the medians here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="api", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.mode, args.jobs)
        return 0

    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    out["load_before"] = os.getloadavg()
    for name in args.only.split(","):
        print(f"{name}:", flush=True)
        if name == "scrape":
            # Alternated with scrapes of an idle worker: what the host alone adds.
            runs, idle = [], []
            for _ in range(args.scrape_runs):
                runs.append(measure("scrape", "api", args.scrape_jobs))
                idle.append(measure("scrape", "idle", 0))
            out[name] = {
                "runs": runs,
                "idle": idle,
                "median_p99_ms": statistics.median(r["p99_ms"] for r in runs),
                "median_p50_ms": statistics.median(r["p50_ms"] for r in runs),
                "idle_median_p99_ms": statistics.median(r["p99_ms"] for r in idle),
            }
        else:
            out[name] = compare(name, args.pairs, args.jobs)
    out["load_after"] = os.getloadavg()

    print()
    print("| comparison | metric | A | B | median A | median B | A/B per pair | median A/B |")
    print("| --- | --- | --- | --- | ---: | ---: | --- | ---: |")
    for name, got in out.items():
        if not isinstance(got, dict) or "ratios" not in got:
            continue
        per_pair = " / ".join(f"{r:.3f}" for r in got["ratios"])
        print(
            f"| {name} | {got['metric']} | {got['a']} | {got['b']} | {fmt(got['median_a'])} "
            f"| {fmt(got['median_b'])} | {per_pair} | {got['median_ratio']:.3f} |"
        )
        if "cpu_ratios" in got:
            per_pair = " / ".join(f"{r:.3f}" for r in got["cpu_ratios"])
            print(
                f"| {name} | worker CPU us/job (B/A) | {got['a']} | {got['b']} "
                f"| {fmt(got['median_cpu_a'])} | {fmt(got['median_cpu_b'])} | {per_pair} "
                f"| {got['median_cpu_ratio']:.3f} |"
            )
    if "scrape" in out:
        got = out["scrape"]
        print(
            f"\n/metrics under W1 load: p50 {got['median_p50_ms']:.2f} ms, p99 "
            f"{got['median_p99_ms']:.2f} ms (median of {len(got['runs'])} runs; scrapes "
            f"per run {', '.join(str(int(r['scrapes'])) for r in got['runs'])}); an idle "
            f"worker's p99 {got['idle_median_p99_ms']:.2f} ms"
        )
    print(f"load average before {out['load_before']}, after {out['load_after']}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

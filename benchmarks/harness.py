"""What every side of the benchmark shares: worker processes, waiting, percentiles.

Workers are real separate processes; the benchmark process is the producer and
the observer.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
CONCURRENCY = 50
ENQUEUE_BATCH = 5_000
W2_JOBS = 300
W2_INTERVAL = 0.010
W3_JOBS = 2_000
W3_SLEEP = 0.05
IDLE_SECONDS = 2.0
DEADLINE = 600.0  # longest wait for any one phase before the workload is called failed
SCALE_PROCESSES = (1, 2, 4)


class BenchError(RuntimeError):
    pass


@dataclass
class Proc:
    """A worker process we started: its log, its RSS, and a clean stop."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    started: float
    stop_signal: int = signal.SIGTERM
    stop_timeout: float = 30.0

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

    def cpu_seconds(self) -> float:
        """User + system CPU time the worker process has used so far (startup included)."""
        stat = Path(f"/proc/{self.worker_pid()}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> dict[str, float]:
        """VmRSS, its anonymous and file-backed parts, and VmHWM (peak), in MiB."""
        fields: dict[str, float] = {}
        for line in Path(f"/proc/{self.worker_pid()}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                fields[key] = int(value.split()[0]) / 1024
        return fields

    def stop(self, timeout: float | None = None) -> None:
        timeout = self.stop_timeout if timeout is None else timeout
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(self.stop_signal)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                print(f"  ! {self.name} did not stop in {timeout:.0f}s: killing it", flush=True)
                # The whole session: pools of forked children go with their parent.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()


@contextlib.contextmanager
def running(proc: Proc) -> Iterator[Proc]:
    try:
        yield proc
    finally:
        proc.stop()


@contextlib.contextmanager
def running_all(procs: list[Proc]) -> Iterator[list[Proc]]:
    try:
        yield procs
    finally:
        for proc in procs:  # signal them all first, then wait: stops overlap
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.send_signal(proc.stop_signal)
        for proc in procs:
            proc.stop()


def base_env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env["TMPDIR"] = str(workdir)
    return env


def wait_until(
    what: str,
    check: Callable[[], bool],
    proc: Proc | None,
    timeout: float = DEADLINE,
    interval: float = 0.01,
) -> float:
    """Poll ``check`` every ``interval`` s; returns the time it first held."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return time.time()
        if proc is not None:
            proc.check_alive()
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


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


def cpu_stats(
    before: float, mid: float, after: float, drain_s: float, jobs: int
) -> dict[str, float]:
    """The store server's CPU seconds in enqueue and in drain (``drain_s``: from the
    end of the enqueue to the last job seen done), its load while draining, and
    its CPU per 1,000 jobs over both."""
    return {
        "server_cpu_enqueue_s": mid - before,
        "server_cpu_drain_s": after - mid,
        "server_cpu_drain_pct": (after - mid) / drain_s * 100 if drain_s > 0 else 0.0,
        "server_cpu_ms_per_1k_jobs": (after - before) * 1000 / jobs * 1000,
    }


@dataclass
class Results:
    raw: dict[str, dict[str, list[dict[str, float]]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add(self, system: str, workload: str, values: dict[str, float]) -> None:
        self.raw.setdefault(system, {}).setdefault(workload, []).append(values)

    def values(self, system: str, workload: str, metric: str) -> list[float]:
        runs = self.raw.get(system, {}).get(workload, [])
        return [r[metric] for r in runs if metric in r]

    def median(self, system: str, workload: str, metric: str) -> float | None:
        values = self.values(system, workload, metric)
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


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"

"""conveyor's side of every workload, on whichever store the run gives it.

Workers: ``python -m conveyor worker benchmarks.apps.conveyor_app:app -c 50`` with
``CONVEYOR_URL`` set (or benchmarks/worker_main.py when the CLI does not work).
The observer polls the backend's counts to know when all jobs are done and
then reads the times the backend stored on the jobs (``started_at`` at claim,
``finished_at`` at settle) for the drain window.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    CONCURRENCY,
    ENQUEUE_BATCH,
    IDLE_SECONDS,
    PY,
    ROOT,
    W2_INTERVAL,
    W2_JOBS,
    W3_JOBS,
    BenchError,
    Proc,
    base_env,
    cpu_stats,
    latency_stats,
    running,
    running_all,
    w3_stats,
    wait_until,
)

CONVEYOR_APP = "benchmarks.apps.conveyor_app:app"
RSS_STEPS: tuple[int, ...] = (10_000, 100_000)
MEM_JOBS = 10_000
MEM_PAYLOAD_BYTES = 100  # the JSON payload, as the Redis issue's memory target states

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

    def __init__(
        self,
        workdir: Path,
        url: str | None = None,
        server_cpu: Callable[[], float | None] = lambda: None,
    ) -> None:
        from conveyor import Conveyor

        self.workdir = workdir
        self.url = url or f"sqlite:///{workdir / 'conveyor.db'}"
        self.server_cpu = server_cpu
        # SQLite counts cost nothing; on a server, polling every 10 ms would put
        # the observer's own queries in the way of the worker it measures.
        self.poll_interval = 0.01 if url is None else 0.05
        self.app = Conveyor(self.url)
        self.loop = asyncio.new_event_loop()
        self.run(self.app.connect())

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.run(self.app.close())
        self.loop.close()

    def start_worker(self, index: int = 0) -> Proc:
        env = base_env(self.workdir)
        env["CONVEYOR_URL"] = self.url
        return Proc.start(
            "conveyor worker",
            conveyor_worker_cmd(),
            env,
            self.workdir / ("worker.log" if index == 0 else f"worker-{index}.log"),
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

    def wait_done(
        self, total: int, proc: Proc, on_first: Callable[[int], None] | None = None
    ) -> float:
        """Wait until ``total`` jobs completed; ``on_first(count)`` is called at the
        first poll that sees any completed."""

        def check() -> bool:
            nonlocal on_first
            failed = self.count("failed")
            if failed:
                raise BenchError(f"{failed} job(s) failed:\n{proc.tail()}")
            completed = self.count("completed")
            if completed and on_first is not None:
                on_first(completed)
                on_first = None
            return completed >= total

        return wait_until(f"{total} completed jobs", check, proc, interval=self.poll_interval)

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
    def drain(
        self, n: int, processes: int, store: Callable[[int], float] | None = None
    ) -> dict[str, float]:
        """``n`` no-op jobs stored by ``store(n)`` (default: ``enqueue_many`` in
        batches; it returns the seconds it took), then drained."""
        cpu0 = self.server_cpu()
        producer0 = time.process_time()
        enqueue_s = self.enqueue_bulk("bench.noop", n) if store is None else store(n)
        producer_s = time.process_time() - producer0
        cpu1, enqueued_at = self.server_cpu(), time.time()
        procs = [self.start_worker(k) for k in range(processes)]
        started: list[tuple[int, float]] = []  # (completed, workers' CPU) once jobs run

        def first_done(completed: int) -> None:
            started.append((completed, sum(proc.cpu_seconds() for proc in procs)))

        with running_all(procs):
            spawned = procs[0].started
            seen = self.wait_done(n, procs[-1], first_done)
            cpu2 = self.server_cpu()
            worker_s = sum(proc.cpu_seconds() for proc in procs)
        first, last = self.window()
        out = {
            "jobs": float(n),
            "enqueue_per_s": n / enqueue_s,
            "drain_per_s": n / (last - first),
            "drain_from_spawn_per_s": n / (seen - spawned),
            # CPU time is steadier than wall time on a shared machine. The producer's
            # covers its SQLite writer thread too; the worker's includes its startup,
            # its drain's is from the first poll that saw a job done to the last.
            "enqueue_cpu_us_per_job": producer_s / n * 1e6,
            "worker_cpu_us_per_job": worker_s / n * 1e6,
        }
        if started and started[0][0] < n:
            done_then, worker_then = started[0]
            out["drain_cpu_us_per_job"] = (worker_s - worker_then) / (n - done_then) * 1e6
        if cpu0 is not None and cpu1 is not None and cpu2 is not None:
            out.update(cpu_stats(cpu0, cpu1, cpu2, seen - enqueued_at, n))
        return out

    def w1(self, n: int) -> dict[str, float]:
        return self.drain(n, 1)

    def scale(self, n: int, processes: int) -> dict[str, float]:
        """The W1 drain with ``processes`` workers that all start before the first claim.

        Worker processes come up at different times (imports, connecting), so the
        jobs wait in a paused queue until every worker has registered; then the
        queue resumes and one last enqueue wakes them all at once.
        """
        self.run(self.app.pause_queue("default"))
        enqueue_s = self.enqueue_bulk("bench.noop", n - 1)
        procs = [self.start_worker(k) for k in range(processes)]
        with running_all(procs):

            async def registered() -> bool:
                return len(await self.app.workers()) >= processes

            wait_until(f"{processes} workers", lambda: self.run(registered()), procs[-1], 120)
            self.run(self.app.resume_queue("default"))
            self.enqueue_bulk("bench.noop", 1)
            self.wait_done(n, procs[-1])
        first, last = self.window()
        return {
            "jobs": float(n),
            "processes": float(processes),
            "enqueue_per_s": (n - 1) / enqueue_s,
            "drain_per_s": n / (last - first),
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

    def mem(self, memory_bytes: Callable[[], int]) -> dict[str, float]:
        """Redis memory per waiting job (100-byte payload) and per completed job kept."""
        pad = "x" * (MEM_PAYLOAD_BYTES - len('{"pad":""}'))
        before = memory_bytes()

        async def go() -> None:
            left = MEM_JOBS
            while left:
                size = min(ENQUEUE_BATCH, left)
                await self.app.enqueue_many([("bench.payload", {"pad": pad})] * size)
                left -= size

        self.run(go())
        waiting = memory_bytes()
        with running(self.start_worker()) as proc:
            self.wait_done(MEM_JOBS, proc)
            time.sleep(1.0)  # the last settles and heartbeats land
            completed = memory_bytes()
        return {
            "jobs": float(MEM_JOBS),
            "bytes_per_waiting_job": (waiting - before) / MEM_JOBS,
            "bytes_per_completed_job": (completed - before) / MEM_JOBS,
        }

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
            if db_bytes:
                out["db_mb"] = db_bytes / (1 << 20)
        a, b = (out[f"after_{s // 1000}k_mb"] for s in RSS_STEPS[:2])
        out["growth_pct"] = (b / a - 1) * 100
        return out

"""The workloads, written once for every peer on PostgreSQL or Redis.

A peer module supplies how to enqueue (its fastest documented bulk API, and a
single enqueue for W2) and the command that starts its worker for a workload;
everything else — starting, waiting, timing — is here, the same for all of them.
Times come from the peer's own handlers through :mod:`benchmarks.peers.recorder`.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from benchmarks.harness import (
    DEADLINE,
    IDLE_SECONDS,
    PY,
    W2_INTERVAL,
    W2_JOBS,
    W3_JOBS,
    BenchError,
    Proc,
    base_env,
    cpu_stats,
    latency_stats,
    running_all,
    w3_stats,
)
from benchmarks.peers.recorder import Record

T = TypeVar("T")
STALL_SECONDS = 60.0  # no job finished for this long: the peer is stuck, not slow


def cli(name: str) -> str:
    """A console script installed next to this interpreter (``celery``, ``rq``…)."""
    return str(Path(PY).parent / name)


class PeerSide:
    """One peer on one fresh store (``url``) for one workload run."""

    name: ClassVar[str]
    kind: ClassVar[str]  # "redis" or "postgres"
    stop_signal: ClassVar[int] = signal.SIGTERM  # a graceful stop for most workers
    w1_jobs_cap: ClassVar[int | None] = None
    """Run W1 on at most this many jobs (a peer too slow for N in reasonable time)."""
    stop_timeout: ClassVar[float] = 30.0
    settings: ClassVar[dict[str, str]] = {}
    """How the peer is configured, per workload, for the README and the JSON."""

    def __init__(self, workdir: Path, url: str, server_cpu: Callable[[], float | None]) -> None:
        self.workdir = workdir
        self.url = url
        self.server_cpu = server_cpu
        self.loop = asyncio.new_event_loop()
        self.setup()

    # -- what a peer supplies ----------------------------------------------------
    def setup(self) -> None:
        """Connect the producer (and create the peer's schema, if it has one)."""

    def teardown(self) -> None:
        """Disconnect the producer."""

    def worker_cmd(self, workload: str, index: int = 0) -> list[str]:
        """The command of worker process ``index`` (several in ``scale``)."""
        raise NotImplementedError

    def enqueue_bulk(self, task: str, n: int) -> None:
        """Enqueue ``n`` jobs of ``task`` (``noop`` or ``sleep``) the fastest way."""
        raise NotImplementedError

    def enqueue_stamp(self, i: int) -> None:
        """Enqueue one W2 job that records its start as stamp ``i``."""
        raise NotImplementedError

    # -- plumbing ----------------------------------------------------------------
    def run(self, work: Awaitable[T]) -> T:
        return self.loop.run_until_complete(work)

    def close(self) -> None:
        try:
            self.teardown()
        finally:
            self.loop.close()

    def start_workers(self, workload: str, processes: int = 1) -> tuple[list[Proc], Record]:
        record = self.workdir / f"record-{workload}-{time.monotonic_ns()}.log"
        env = base_env(self.workdir)
        env.update(BENCH_URL=self.url, BENCH_RECORD=str(record), BENCH_WORKLOAD=workload)
        procs = [
            Proc.start(
                f"{self.name} worker",
                self.worker_cmd(workload, k),
                env,
                self.workdir / f"worker-{workload}-{k}.log",
                self.stop_signal,
            )
            for k in range(processes)
        ]
        for proc in procs:
            proc.stop_timeout = self.stop_timeout
        return procs, Record(record)

    @staticmethod
    def wait_for(
        what: str, record: Record, procs: list[Proc], ready: Callable[[Record], bool]
    ) -> float:
        """Poll the record every 10 ms until ``ready``; fail on a dead worker or a stall."""
        deadline = time.monotonic() + DEADLINE
        progress, last_move = -1, time.monotonic()
        while True:
            record.poll()
            if ready(record):
                return time.time()
            now = time.monotonic()
            moved = record.done + len(record.stamps)
            if moved != progress:
                progress, last_move = moved, now
            for proc in procs:
                proc.check_alive()
            if now - last_move > STALL_SECONDS or now > deadline:
                tail = procs[0].tail() if procs else ""
                raise BenchError(f"stuck waiting for {what} ({record.done} done):\n{tail}")
            time.sleep(0.01)

    def drain(self, n: int, processes: int) -> dict[str, float]:
        """``n`` no-op jobs enqueued in bulk, then ``processes`` workers drain them."""
        cpu0 = self.server_cpu()
        t0 = time.perf_counter()
        self.enqueue_bulk("noop", n)
        enqueue_s = time.perf_counter() - t0
        cpu1, enqueued_at = self.server_cpu(), time.time()
        procs, record = self.start_workers("w1", processes)
        with running_all(procs):
            seen = self.wait_for(f"{n} jobs", record, procs, lambda r: r.done >= n)
            cpu2 = self.server_cpu()
        from_spawn = seen - procs[0].started
        out = {
            "jobs": float(n),
            "enqueue_per_s": n / enqueue_s,
            "drain_per_s": n / record.window(),
            "drain_from_spawn_per_s": n / from_spawn,
        }
        if cpu0 is not None and cpu1 is not None and cpu2 is not None:
            out.update(cpu_stats(cpu0, cpu1, cpu2, seen - enqueued_at, n))
        return out

    # -- the workloads -----------------------------------------------------------
    def jobs_for(self, n: int) -> int:
        return min(n, self.w1_jobs_cap) if self.w1_jobs_cap else n

    def w1(self, n: int) -> dict[str, float]:
        return self.drain(self.jobs_for(n), 1)

    def scale(self, n: int, processes: int) -> dict[str, float]:
        return self.drain(self.jobs_for(n), processes)

    def w2(self) -> dict[str, float]:
        procs, record = self.start_workers("w2")
        with running_all(procs):
            self.enqueue_stamp(-1)  # ready: a first job went through
            self.wait_for("the warm-up job", record, procs, lambda r: -1 in r.stamps)
            time.sleep(IDLE_SECONDS)
            sent: dict[int, float] = {}
            t0 = time.perf_counter()
            for i in range(W2_JOBS):
                pause = t0 + i * W2_INTERVAL - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                sent[i] = time.time()
                self.enqueue_stamp(i)
            self.wait_for("W2 stamps", record, procs, lambda r: len(r.stamps) > W2_JOBS)
        return latency_stats([record.stamps[i] - at for i, at in sent.items()], W2_JOBS)

    def w3(self) -> dict[str, float]:
        self.enqueue_bulk("sleep", W3_JOBS)
        procs, record = self.start_workers("w3")
        with running_all(procs):
            self.wait_for(f"{W3_JOBS} jobs", record, procs, lambda r: r.done >= W3_JOBS)
        return w3_stats(record.window())


def gather_in_chunks(
    make: Callable[[], Coroutine[Any, Any, Any]], n: int, chunk: int
) -> Coroutine[Any, Any, None]:
    """``n`` enqueue calls, ``chunk`` at a time in flight: for peers with no bulk API."""

    async def go() -> None:
        left = n
        while left:
            size = min(chunk, left)
            await asyncio.gather(*(make() for _ in range(size)))
            left -= size

    return go()

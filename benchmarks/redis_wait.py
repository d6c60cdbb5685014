"""What Redis WAIT mode (``?wait_replicas=1``) costs an enqueue.

A private primary and one replica on this machine (``redis-server`` on free
ports, temporary directories), one app per mode, and three ways to enqueue:
one call at a time, 16 calls in flight, and batches of 100 (``enqueue_many``).
Each repetition runs every way with WAIT off and on, alternated, so a noisy
moment of a shared host hurts both; the table gives medians of enqueues per
second and on/off.

    python benchmarks/redis_wait.py [--jobs 2000] [--repeat 3]

On one host the replica is a loopback round trip away: the figures are the
floor of WAIT's cost; across a network each enqueue waits a round trip more.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from conveyor.app import Conveyor
from conveyor.backends.base import JobFilter

IN_FLIGHT = 16
BATCH = 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def up(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def primary_and_replica() -> Iterator[int]:
    """A primary and a connected replica; yields the primary's port."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="conveyor-wait-") as tmp:
        try:
            primary = free_port()
            for name, extra in (
                ("primary", []),
                ("replica", ["--replicaof", "127.0.0.1", str(primary)]),
            ):
                port = primary if name == "primary" else free_port()
                directory = Path(tmp) / name
                directory.mkdir()
                argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                        "--dir", str(directory), "--logfile", str(directory / "log"),
                        *extra]  # fmt: skip
                procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL))
                deadline = time.monotonic() + 10
                while not up(port):
                    if time.monotonic() > deadline:
                        raise SystemExit(f"redis-server ({name}) did not start")
                    time.sleep(0.02)
            deadline = time.monotonic() + 10
            cli = shutil.which("redis-cli") or "redis-cli"
            while (
                b"connected_slaves:1"
                not in subprocess.run(
                    [cli, "-p", str(primary), "info", "replication"],
                    capture_output=True,
                    check=False,
                ).stdout
            ):
                if time.monotonic() > deadline:
                    raise SystemExit("the replica did not connect")
                time.sleep(0.05)
            yield primary
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()


async def one_at_a_time(app: Conveyor, jobs: int) -> None:
    for _ in range(jobs):
        await app.enqueue("bench.noop", {"n": 1})


async def in_flight(app: Conveyor, jobs: int) -> None:
    async def caller(count: int) -> None:
        for _ in range(count):
            await app.enqueue("bench.noop", {"n": 1})

    await asyncio.gather(*(caller(jobs // IN_FLIGHT) for _ in range(IN_FLIGHT)))


async def batches(app: Conveyor, jobs: int) -> None:
    for _ in range(jobs // BATCH):
        await app.enqueue_many([("bench.noop", {"n": 1}, None)] * BATCH)


WAYS: dict[str, Callable[[Conveyor, int], Awaitable[None]]] = {
    "one at a time": one_at_a_time,
    f"{IN_FLIGHT} in flight": in_flight,
    f"batches of {BATCH}": batches,
}


async def measure(port: int, jobs: int, repeat: int) -> dict[str, dict[bool, list[float]]]:
    base = f"redis://127.0.0.1:{port}/0?prefix=bench"
    apps = {
        False: Conveyor(base),
        True: Conveyor(f"{base}&wait_replicas=1&wait_timeout=5s"),
    }
    rates: dict[str, dict[bool, list[float]]] = {way: {False: [], True: []} for way in WAYS}
    try:
        for app in apps.values():
            await app.connect()
        for rep in range(repeat):
            for way, run in WAYS.items():
                # Alternate which mode goes first from one repetition to the next.
                for wait in (False, True) if rep % 2 == 0 else (True, False):
                    started = time.perf_counter()
                    await run(apps[wait], jobs)
                    rates[way][wait].append(jobs / (time.perf_counter() - started))
            # Start each repetition on an empty store (the jobs are never run).
            backend = await apps[False].connect()
            await backend.purge_jobs(JobFilter())
    finally:
        for app in apps.values():
            await app.close()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=2000, help="enqueues per measurement")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with primary_and_replica() as port:
        rates = asyncio.run(measure(port, args.jobs, args.repeat))
    print(f"{args.jobs} enqueues per measurement, medians of {args.repeat}")
    print(f"{'':<16} {'WAIT off /s':>12} {'WAIT on /s':>12} {'on/off':>7}")
    for way, by_mode in rates.items():
        off, on = statistics.median(by_mode[False]), statistics.median(by_mode[True])
        print(f"{way:<16} {off:>12,.0f} {on:>12,.0f} {on / off:>7.2f}")


if __name__ == "__main__":
    main()

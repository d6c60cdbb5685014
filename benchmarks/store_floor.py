"""The store's own floor per job: claims and settles of no-op jobs, no worker.

What ``benchmarks/batches.py`` drains, minus the worker: for each store
(SQLite, Redis on its own redis-server, a fresh PostgreSQL database per run),
``--jobs`` no-op jobs are enqueued, then claimed ``--chunk`` at a time and each
claim's jobs settled ``complete``. ``overlapped``: one claim and one settle in
flight at a time, as a worker sends them; ``serial``: each settle before the
next claim. Prints jobs/s, the client's CPU per job and, on Redis, the
redis-server's. No drain can be faster than its store's overlapped floor, batch
handlers included: each job is still claimed and settled on its own.

    .venv/bin/python benchmarks/store_floor.py --jobs 10000 --chunk 200 --repeat 3

Run by hand, never as part of the test gate.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.batches import build_app
from benchmarks.stores import PostgresStore, RedisStore, Store
from conveyor.backends.base import Backend, ClaimRequest, Outcome, Settlement
from conveyor.job import Job


def _request(chunk: int) -> ClaimRequest:
    return ClaimRequest(worker_id="floor", queues=["default"], limit=chunk, lease=30.0)


def _completed(jobs: list[Job]) -> list[Settlement]:
    return [Settlement(j.id, j.lease_token or "", Outcome.COMPLETE, j.task) for j in jobs]


async def _serial(backend: Backend, chunk: int) -> int:
    done = 0
    while jobs := (await backend.claim_jobs(_request(chunk))).jobs:
        await backend.settle_jobs(_completed(jobs))
        done += len(jobs)
    return done


async def _overlapped(backend: Backend, chunk: int) -> int:
    """The next claim goes out while the last one's jobs are being settled."""
    claimed: asyncio.Queue[list[Job] | None] = asyncio.Queue(maxsize=1)
    done = 0

    async def claim() -> None:
        nonlocal done
        while jobs := (await backend.claim_jobs(_request(chunk))).jobs:
            done += len(jobs)
            await claimed.put(jobs)
        await claimed.put(None)

    async def settle() -> None:
        while (jobs := await claimed.get()) is not None:
            await backend.settle_jobs(_completed(jobs))

    await asyncio.gather(claim(), settle())
    return done


async def floor_rate(url: str, jobs: int, chunk: int, mode: str, server: Store | None) -> str:
    app = build_app(url, chunk)
    try:
        for start in range(0, jobs, 1000):
            await app.enqueue_many([("noop", None)] * min(1000, jobs - start))
        backend = await app.connect()
        server_then = server.cpu_seconds() if server is not None else None
        cpu_then = time.process_time()
        began = time.perf_counter()
        run = _overlapped if mode == "overlapped" else _serial
        done = await run(backend, chunk)
        elapsed = time.perf_counter() - began
        cpu = (time.process_time() - cpu_then) / done * 1e6
        if done != jobs:
            raise RuntimeError(f"claimed and settled {done} of {jobs}")
        line = f"{done / elapsed:,.0f} jobs/s, client CPU {cpu:.1f} us/job"
        server_now = server.cpu_seconds() if server is not None else None
        if server_now is not None and server_then is not None:
            line += f", server CPU {(server_now - server_then) / done * 1e6:.1f} us/job"
        return line
    finally:
        await app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--chunk", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", default="overlapped,serial")
    parser.add_argument("--stores", default="sqlite,redis,postgres")
    parser.add_argument(
        "--pg-admin-url",
        default="postgresql://root@127.0.0.1:5432/postgres",
        help="a server where the benchmark may create (and drop) a database per run",
    )
    args = parser.parse_args()
    print(f"{args.jobs} no-op jobs, claims and settles of {args.chunk}, no worker")
    for store in args.stores.split(","):
        server: Store | None = None
        if store == "redis":
            server = RedisStore()
        elif store == "postgres":
            server = PostgresStore(args.pg_admin_url)
        try:
            for mode in args.modes.split(","):
                lines = []
                for repetition in range(args.repeat):
                    if server is not None:
                        with server.fresh(f"floor_{mode}") as url:
                            assert url is not None
                            watched = server if store == "redis" else None
                            lines.append(
                                asyncio.run(floor_rate(url, args.jobs, args.chunk, mode, watched))
                            )
                    else:
                        with tempfile.TemporaryDirectory() as tmp:
                            url = f"sqlite:///{tmp}/floor-{repetition}.db"
                            lines.append(
                                asyncio.run(floor_rate(url, args.jobs, args.chunk, mode, None))
                            )
                rates = [float(line.split(" jobs/s")[0].replace(",", "")) for line in lines]
                print(f"{store:8} {mode:10} median {statistics.median(rates):,.0f} jobs/s")
                for line in lines:
                    print(f"{'':20} {line}")
        finally:
            if server is not None:
                server.close()


if __name__ == "__main__":
    main()

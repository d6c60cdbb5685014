"""What one enqueue costs the store, without a worker: the plain-queue hot path.

- **sqlite**: ``enqueue_jobs`` of 10 batches of 1,000 jobs on a plain queue
  into a fresh file, the process CPU per job (the writer thread included);
  once without options and once with a tenant on every job.
- **postgres**: ``enqueue_plain`` of 10 batches of 1,000 jobs, each in its own
  transaction, the round trip per job, in a schema of its own on the
  ``--pg-url`` server (dropped after).

Medians of ``--repeat``. To compare two versions of conveyor, run this file
alternately from each worktree (its own ``PYTHONPATH``), before, after, after,
before, ...; W1 (run.py) measures the same path but scatters more on a loaded
host.

    PYTHONPATH=src .venv/bin/python benchmarks/enqueue_cost.py --repeat 5

Run by hand, never as part of the test gate.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid

import asyncpg

from conveyor.backends.base import NewJob
from conveyor.backends.postgres.migrate import migrate
from conveyor.backends.sqlite import SQLiteBackend
from conveyor.ids import new_id

BATCHES = 10
BATCH = 1_000


async def sqlite_cpu_per_job(tenant: str | None) -> float:
    """Process CPU seconds per job of ``enqueue_jobs`` into a fresh file."""
    with tempfile.TemporaryDirectory() as tmp:
        backend = SQLiteBackend(f"sqlite:///{tmp}/cost.db")
        await backend.open()
        try:
            spent = 0.0
            for _ in range(BATCHES):
                jobs = [
                    NewJob(id=new_id(), task="t", queue="q", payload=b"{}", tenant=tenant)
                    for _ in range(BATCH)
                ]
                began = time.process_time()
                await backend.enqueue_jobs(jobs)
                spent += time.process_time() - began
        finally:
            await backend.close()
    return spent / (BATCHES * BATCH)


async def postgres_seconds_per_job(url: str) -> float:
    """Round trip per job of ``enqueue_plain`` (one transaction per batch)."""
    schema = f"enqueue_cost_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(url)
    try:
        await migrate(conn, schema, f"{schema}_work")
        call = f'SELECT * FROM "{schema}".enqueue_plain($1, $2, $3, $4, 0, 3, 0)'
        payloads = [b"{}"] * BATCH
        spent = 0.0
        for _ in range(BATCHES):
            ids = [new_id() for _ in range(BATCH)]
            began = time.perf_counter()
            async with conn.transaction():
                await conn.fetch(call, ids, payloads, "t", "q")
            spent += time.perf_counter() - began
        return spent / (BATCHES * BATCH)
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--pg-url", default="postgresql://root@127.0.0.1:5432/test")
    args = parser.parse_args()
    stores = args.stores.split(",")
    if "sqlite" in stores:
        for label, tenant in (("plain", None), ("with a tenant", "acct")):
            runs = [asyncio.run(sqlite_cpu_per_job(tenant)) for _ in range(args.repeat)]
            each = ", ".join(f"{r * 1e6:.2f}" for r in runs)
            print(
                f"sqlite   enqueue {label}: {statistics.median(runs) * 1e6:.2f} us CPU/job ({each})"
            )
    if "postgres" in stores:
        runs = [asyncio.run(postgres_seconds_per_job(args.pg_url)) for _ in range(args.repeat)]
        each = ", ".join(f"{r * 1e6:.2f}" for r in runs)
        print(f"postgres enqueue_plain: {statistics.median(runs) * 1e6:.2f} us/job ({each})")


if __name__ == "__main__":
    main()

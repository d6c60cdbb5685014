"""The conveyor side of the benchmarks, loaded by the worker process:

    python -m conveyor worker benchmarks.apps.conveyor_app:app -c 50

The backend comes from ``CONVEYOR_URL`` (run.py points it at a fresh SQLite file).
Everything else is conveyor's defaults.
"""

from __future__ import annotations

import asyncio
import time

from conveyor import Conveyor, JobContext

app = Conveyor()


@app.task("bench.noop")
async def noop(ctx: JobContext) -> None:
    """W1 and RSS: the job itself costs nothing; what is left is the queue's cost."""


@app.task("bench.stamp")
async def stamp(ctx: JobContext, **payload: object) -> float:
    """W2: the moment the handler starts, stored as the job's result."""
    return time.time()


@app.task("bench.sleep")
async def sleep(ctx: JobContext) -> None:
    """W3: 50 ms of waiting on I/O."""
    await asyncio.sleep(0.05)


@app.task("bench.payload")
async def payload(ctx: JobContext, **data: object) -> None:
    """Memory: a job that carries a payload and stores no result."""

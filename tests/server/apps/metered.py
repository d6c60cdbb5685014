"""An app for the /metrics test: its jobs run in separate worker processes.
Its URL comes from ``CONVEYOR_URL``."""

from __future__ import annotations

import asyncio

from conveyor.app import Conveyor
from conveyor.context import JobContext
from conveyor.retry import Backoff

app = Conveyor(poll_interval=0.1, heartbeat_interval=0.5, stats_flush_interval=0.2)


@app.task("nap")
async def nap(ctx: JobContext, seconds: float) -> None:
    await asyncio.sleep(seconds)


@app.task("doomed", attempts=2, backoff=Backoff.fixed(0.01), circuit_threshold=0)
async def doomed(ctx: JobContext) -> None:
    raise RuntimeError("always")

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


# No backoff: the retry is due at once, so a --burst worker (which exits when
# nothing is due) always runs it; a 10 ms delay let a fast worker exit first.
@app.task("doomed", attempts=2, backoff=Backoff.fixed(0), circuit_threshold=0)
async def doomed(ctx: JobContext) -> None:
    raise RuntimeError("always")

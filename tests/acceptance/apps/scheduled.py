"""An app with schedules, for the scheduler CLI tests and the multi-scheduler
chaos test; its URL comes from ``CONVEYOR_URL``."""

from __future__ import annotations

from conveyor.app import Conveyor
from conveyor.context import JobContext

app = Conveyor(poll_interval=0.1, heartbeat_interval=0.5, shutdown_timeout=5)


@app.task("tick")
async def tick(ctx: JobContext, **payload: object) -> None:
    return None


app.schedule("every-second", cron="* * * * * *", task="tick", payload={"from": "cron"})
app.schedule(
    "nightly",
    cron="30 2 * * *",
    task="tick",
    timezone="Europe/Berlin",
    payload={"report": "daily"},
    queue="reports",
)

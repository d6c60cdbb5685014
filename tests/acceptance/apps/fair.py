"""An app with a fair queue, for the CLI acceptance tests (URL from ``CONVEYOR_URL``)."""

from __future__ import annotations

from conveyor.app import Conveyor
from conveyor.context import JobContext

app = Conveyor(poll_interval=0.1, heartbeat_interval=0.5, shutdown_timeout=5)
app.queue("emails", fairness="tenant", weights={"org-1": 3})


@app.task("mail.send", queue="emails")
async def send(ctx: JobContext, to: str) -> str:
    return to

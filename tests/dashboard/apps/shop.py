"""The app the dashboard tests serve and fill: a few tasks that complete, fail
(with markup in their error messages), report progress or trip a circuit, and
one schedule in a zone other than UTC. Its URL comes from ``CONVEYOR_URL``."""

from __future__ import annotations

from typing import Any

from conveyor.app import Conveyor
from conveyor.context import JobContext
from conveyor.retry import Backoff

#: Markup that must show as text everywhere (task name, payload, error message).
XSS = '<script>alert("xss")</script><img src=x onerror=alert(1)>'
XSS_TASK = f"evil.{XSS}"


def build(url: str | None = None, **settings: Any) -> Conveyor:
    """The app on ``url`` (default: ``CONVEYOR_URL``)."""
    app = Conveyor(
        url, poll_interval=0.05, heartbeat_interval=0.5, stats_flush_interval=0.2, **settings
    )
    app.queue("emails", max_size=10_000, ttl="1h")

    @app.task("mail.send", queue="emails")
    async def send(ctx: JobContext, to: str) -> dict[str, Any]:
        return {"sent": to}

    @app.task("report.build")
    async def build_report(ctx: JobContext, pages: int) -> int:
        await ctx.progress(100, phase="done")
        return pages

    @app.task("pay.charge", attempts=2, backoff=Backoff.fixed(0.01), circuit_threshold=0)
    async def charge(ctx: JobContext, note: str) -> None:
        raise RuntimeError(f"card declined: {note}")

    @app.task(XSS_TASK, attempts=1, circuit_threshold=0)
    async def evil(ctx: JobContext, note: str, html: str = "") -> None:
        raise ValueError(note)

    @app.task("flaky.api", attempts=1, circuit_threshold=2, circuit_open_for="1h")
    async def flaky(ctx: JobContext) -> None:
        raise ConnectionError("upstream unavailable")

    app.schedule(
        "nightly-report",
        cron="0 30 2 * * *",
        task="report.build",
        payload={"pages": 3},
        timezone="Europe/Paris",
    )
    app.schedule("mail-digest", every="5m", task="mail.send", payload={"to": "ops@example.com"})
    return app


app = build()

"""Sample tasks for ``conveyor demo``: one of each kind a real app has.

=================  ==============================================================
``demo.fast``      async, a few milliseconds
``demo.sync``      a plain ``def``: runs in the worker's thread pool
``demo.slow``      async, one to two seconds
``demo.report``    async, reports its progress page by page (``ctx.progress``)
``demo.flaky``     fails twice, then succeeds (retries with a 0.2 s fixed backoff)
``demo.failing``   always fails: ends in the dead-letter queue
``demo.remind``    enqueued with ``delay=2``: waits as ``delayed`` first
=================  ==============================================================

``app`` reads ``CONVEYOR_URL`` like any app, so after a demo you can run
``conveyor worker conveyor.demo.tasks:app --url sqlite:///./conveyor-demo.db``.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from typing import Any

from conveyor.app import Conveyor
from conveyor.context import JobContext
from conveyor.retry import Backoff

DEMO_URL = "sqlite:///./conveyor-demo.db"
QUEUES = ("demo", "demo.reports", "demo.payments")

#: task -> (what it shows, how many jobs the demo enqueues)
KINDS: dict[str, tuple[str, int]] = {
    "demo.fast": ("async, milliseconds", 150),
    "demo.sync": ("plain def, thread pool", 40),
    "demo.slow": ("async, 1-2 s", 12),
    "demo.report": ("progress via ctx.progress", 12),
    "demo.flaky": ("fails twice, then succeeds", 20),
    "demo.failing": ("always fails: dead letter", 4),
    "demo.remind": ("enqueued with delay=2", 20),
}


def create_app(url: str | None = None, **settings: Any) -> Conveyor:
    """An app with the demo's tasks; ``settings`` override the app's settings."""
    app = Conveyor(url, **{"poll_interval": 0.1, **settings})

    @app.task("demo.fast", queue="demo")
    async def fast(ctx: JobContext, n: int) -> dict[str, int]:
        await asyncio.sleep(random.uniform(0.005, 0.04))
        return {"n": n, "square": n * n}

    @app.task("demo.sync", queue="demo")
    def checksum(ctx: JobContext, n: int) -> str:
        time.sleep(random.uniform(0.02, 0.1))  # blocking is fine: this runs in a thread
        return hashlib.sha256(f"chunk-{n}".encode() * 1000).hexdigest()[:16]

    @app.task("demo.slow", queue="demo.reports")
    async def slow(ctx: JobContext, seconds: float) -> dict[str, float]:
        await asyncio.sleep(seconds)
        return {"slept": seconds}

    @app.task("demo.report", queue="demo.reports")
    async def report(ctx: JobContext, pages: int) -> dict[str, int]:
        for page in range(1, pages + 1):
            await asyncio.sleep(0.1)
            await ctx.progress(100 * page / pages, page=page, pages=pages)
        return {"pages": pages}

    # circuit_threshold=0: these fail on purpose; the breaker would pause the whole task.
    @app.task(
        "demo.flaky",
        queue="demo.payments",
        attempts=4,
        backoff=Backoff.fixed(0.2),
        circuit_threshold=0,
    )
    async def flaky(ctx: JobContext, order: int) -> dict[str, Any]:
        await asyncio.sleep(0.02)
        if ctx.job.attempts <= 2:
            raise ConnectionError(f"payment gateway timed out (attempt {ctx.job.attempts})")
        return {"order": order, "charged": True}

    @app.task(
        "demo.failing",
        queue="demo.payments",
        attempts=2,
        backoff=Backoff.fixed(0.2),
        circuit_threshold=0,
    )
    async def failing(ctx: JobContext, order: int) -> None:
        await asyncio.sleep(0.02)
        raise ValueError(f"card declined for order #{order}")

    @app.task("demo.remind", queue="demo")
    async def remind(ctx: JobContext, user: str) -> dict[str, str]:
        return {"reminded": user}

    return app


def plan(rng: random.Random | None = None) -> list[tuple[str, Any, dict[str, Any]]]:
    """The demo's jobs, shuffled, as ``app.enqueue_many`` items."""
    rng = rng or random.Random()
    items: list[tuple[str, Any, dict[str, Any]]] = []
    tenants = ("acme", "globex", "initech")
    for n in range(KINDS["demo.fast"][1]):
        items.append(("demo.fast", {"n": n}, {"tenant": rng.choice(tenants)}))
    for n in range(KINDS["demo.sync"][1]):
        items.append(("demo.sync", {"n": n}, {}))
    for _ in range(KINDS["demo.slow"][1]):
        items.append(("demo.slow", {"seconds": round(rng.uniform(1.0, 2.0), 2)}, {}))
    for _ in range(KINDS["demo.report"][1]):
        items.append(("demo.report", {"pages": rng.randint(5, 15)}, {"priority": 10}))
    for n in range(KINDS["demo.flaky"][1]):
        items.append(("demo.flaky", {"order": 1000 + n}, {}))
    for n in range(KINDS["demo.failing"][1]):
        items.append(("demo.failing", {"order": 2000 + n}, {"tenant": "globex"}))
    rng.shuffle(items)
    for n in range(KINDS["demo.remind"][1]):
        items.append(("demo.remind", {"user": f"user-{n}"}, {"delay": 2}))
    return items


app = create_app()

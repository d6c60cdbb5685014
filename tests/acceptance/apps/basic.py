"""A small app for the CLI acceptance tests; its URL comes from ``CONVEYOR_URL``."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from conveyor.app import Conveyor
from conveyor.context import JobContext
from conveyor.retry import Backoff

app = Conveyor(poll_interval=0.1, heartbeat_interval=0.5, shutdown_timeout=5)


@app.task("add")
async def add(ctx: JobContext, a: int, b: int) -> int:
    return a + b


@app.task("sleep")
async def sleep(ctx: JobContext, seconds: float) -> dict[str, Any]:
    await asyncio.sleep(seconds)
    return {"pid": os.getpid()}


@app.task("blocking")
def blocking(ctx: JobContext, seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


@app.task("explode", attempts=2, backoff=Backoff.fixed(0.05), circuit_threshold=0)
async def explode(ctx: JobContext, why: str = "boom") -> None:
    raise RuntimeError(why)


@app.task("mail.send", queue="emails")
async def send(ctx: JobContext, to: str) -> str:
    return f"sent to {to}"


not_an_app = {"this": "is a dict"}


@app.task("crm.sync", key_concurrency=1, concurrency_key=lambda payload: payload["account"])
async def crm_sync(ctx: JobContext, account: str, seconds: float = 30.0) -> None:
    await asyncio.sleep(seconds)


@app.task("api.call", rate_limit="2/m", rate_limit_key=lambda payload: payload["api"])
async def api_call(ctx: JobContext, api: str) -> str:
    return api

"""``idempotency_ttl`` per task and per enqueue (the setting stays the default)."""

from __future__ import annotations

import asyncio

import pytest
from worker_fixtures import Stack

from conveyor.context import JobContext
from conveyor.task import Handler


async def test_a_task_keeps_its_keys_for_its_own_ttl(stack: Stack) -> None:
    app = stack.app(idempotency_ttl="1h")

    @app.task("short", idempotency_ttl="0.3s")
    async def short(ctx: JobContext) -> None: ...

    @app.task("long")
    async def long(ctx: JobContext) -> None: ...

    first = await app.enqueue("short", idempotency_key="k1")
    kept = await app.enqueue("long", idempotency_key="k2")
    assert (await app.enqueue("short", idempotency_key="k1")).duplicate
    await asyncio.sleep(0.6)
    again = await app.enqueue("short", idempotency_key="k1")
    assert not again.duplicate
    assert again.id != first.id
    still = await app.enqueue("long", idempotency_key="k2")  # the setting's hour
    assert (still.duplicate, still.id) == (True, kept.id)


async def test_an_enqueue_overrides_the_ttl(stack: Stack) -> None:
    app = stack.app()

    class Report(Handler):
        name = "report"
        idempotency_ttl = "1h"

        async def process(self, ctx: JobContext, payload: dict[str, object]) -> None: ...

    app.register(Report())
    first = await app.enqueue("report", idempotency_key="r", idempotency_ttl=0.3)
    await asyncio.sleep(0.6)
    second = await app.enqueue("report", idempotency_key="r")
    assert not second.duplicate
    assert second.id != first.id
    assert (await app.enqueue("report", idempotency_key="r")).duplicate  # the class's hour


async def test_bad_ttls_are_refused(stack: Stack) -> None:
    app = stack.app()
    with pytest.raises(ValueError, match="idempotency_ttl"):
        app.task("bad", idempotency_ttl=0)
    with pytest.raises(ValueError, match="idempotency_ttl"):
        await app.enqueue("any", idempotency_key="x", idempotency_ttl="-1s")
    assert await app.count_jobs() == 0

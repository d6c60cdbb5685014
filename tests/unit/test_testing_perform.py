"""conveyor.testing.perform_job: one handler run, in-process, nothing stored."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.context import JobContext
from conveyor.errors import SerializationError, UnknownTask
from conveyor.job import JobState
from conveyor.task import Handler
from conveyor.testing import perform_job


class Refused(Exception):
    pass


class Strict(Handler):
    name = "strict"
    queue = "checks"
    attempts = 7

    def __init__(self) -> None:
        self.processed: list[Any] = []

    def validate(self, payload: Any) -> None:
        if "n" not in payload:
            raise Refused("n is required")

    async def process(self, ctx: JobContext, payload: Any) -> Any:
        self.processed.append(payload)
        return {"double": payload["n"] * 2, "queue": ctx.job.queue, "of": ctx.job.max_attempts}


@pytest.fixture
async def app() -> AsyncIterator[Conveyor]:
    app = Conveyor("memory://")
    try:
        yield app
    finally:
        await app.close()


async def test_async_function_handler_gets_a_real_context(app: Conveyor) -> None:
    seen: list[JobContext] = []

    @app.task("greet")
    async def greet(ctx: JobContext, name: str) -> str:
        seen.append(ctx)
        await ctx.progress(50, step="hello")
        return f"hello {name}"

    result = await perform_job(app, "greet", {"name": "ada"}, tenant="acme", attempts=2)
    assert result == "hello ada"
    (ctx,) = seen
    assert isinstance(ctx, JobContext)
    assert (ctx.job.task, ctx.job.payload, ctx.job.tenant) == ("greet", {"name": "ada"}, "acme")
    assert (ctx.job.state, ctx.job.attempts) == (JobState.ACTIVE, 2)
    assert ctx.job.progress == {"percent": 50, "step": "hello"}
    assert ctx.worker_id == "perform_job"
    assert await app.count_jobs() == 0  # nothing stored


async def test_sync_handler_runs_in_a_thread(app: Conveyor) -> None:
    @app.task("count")
    def count(ctx: JobContext, items: list[int]) -> dict[str, Any]:
        return {"n": len(items), "thread": threading.current_thread().name}

    result = await perform_job(app, "count", {"items": (1, 2, 3)})  # a tuple, as JSON: a list
    assert result["n"] == 3
    assert result["thread"] != threading.current_thread().name


async def test_no_payload_is_an_empty_object(app: Conveyor) -> None:
    @app.task("tick")
    async def tick(ctx: JobContext, **payload: Any) -> dict[str, Any]:
        return payload

    assert await perform_job(app, "tick") == {}


async def test_class_handler_validates_first(app: Conveyor) -> None:
    handler = Strict()
    app.register(handler)
    assert await perform_job(app, "strict", {"n": 4}) == {"double": 8, "queue": "checks", "of": 7}
    with pytest.raises(Refused, match="n is required"):
        await perform_job(app, "strict", {"m": 1})
    assert handler.processed == [{"n": 4}]


async def test_the_handlers_exception_is_raised(app: Conveyor) -> None:
    @app.task("boom")
    def boom(ctx: JobContext) -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        await perform_job(app, "boom")


async def test_what_a_worker_could_not_store_raises(app: Conveyor) -> None:
    @app.task("opaque")
    async def opaque(ctx: JobContext, **payload: Any) -> object:
        return object()

    with pytest.raises(SerializationError):
        await perform_job(app, "opaque")
    with pytest.raises(SerializationError):
        await perform_job(app, "opaque", {"when": object()})


async def test_unknown_task(app: Conveyor) -> None:
    with pytest.raises(UnknownTask):
        await perform_job(app, "nope")

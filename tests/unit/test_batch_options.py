"""Batch task options are checked when the task is declared."""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import BatchContext, Conveyor, Handler
from conveyor.job import Job


@pytest.mark.parametrize("size", [0, -1, True, 2.0, "32"])
def test_batch_size_must_be_a_positive_integer(size: Any) -> None:
    app = Conveyor("memory://")
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        app.task("t", batch_size=size)


def test_batch_wait_is_a_duration_and_needs_a_batch_size() -> None:
    app = Conveyor("memory://")

    @app.task("t", batch_size=32, batch_wait="200ms")
    async def t(ctx: BatchContext, jobs: list[Job]) -> list[Any]:
        return []

    assert (t.options.batch_size, t.options.batch_wait) == (32, 0.2)
    with pytest.raises(ValueError, match="not a duration"):
        app.task("u", batch_size=2, batch_wait="soon")
    with pytest.raises(ValueError, match="batch_wait needs batch_size"):
        app.task("v", batch_wait="1s")


def test_a_batch_handler_class_must_define_process_batch() -> None:
    class Forgot(Handler):
        name = "forgot"
        batch_size = 4

        async def process(self, ctx: Any, payload: Any) -> None:
            return None

    with pytest.raises(ValueError, match="define process_batch"):
        Conveyor("memory://").register(Forgot())


def test_a_batch_handler_class_takes_its_options_from_attributes() -> None:
    class Embed(Handler):
        name = "embed"
        batch_size = 8
        batch_wait = "1s"

        def process_batch(self, ctx: BatchContext, jobs: list[Job]) -> list[Any]:  # type: ignore[override]
            return [None] * len(jobs)

    task = Conveyor("memory://").register(Embed())
    assert (task.options.batch_size, task.options.batch_wait, task.is_async) == (8, 1.0, False)

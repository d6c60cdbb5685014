"""Where a per-key rate limit shows: the worker's start banner names it, and a
worker sends it to the store as ``key_rate_limits`` (never as a task-wide one)."""

from __future__ import annotations

import logging

import pytest

from conveyor import Conveyor
from conveyor.cli.worker import log_tasks
from conveyor.context import JobContext
from conveyor.ratelimit import RateLimit
from conveyor.worker.worker import Worker


def make_app() -> Conveyor:
    app = Conveyor("memory://")

    @app.task("call", rate_limit="10/s", rate_limit_key="tenant")
    async def call(ctx: JobContext) -> None: ...

    @app.task("bulk", rate_limit="100/m")
    async def bulk(ctx: JobContext) -> None: ...

    @app.task("plain")
    async def plain(ctx: JobContext) -> None: ...

    return app


def test_the_banner_names_each_rate_limit(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="conveyor.worker"):
        log_tasks(make_app())
    lines = {line.split()[0]: line for line in caplog.messages[1:]}
    assert lines["call"].endswith("rate limit 10/1s per rate_limit_key cluster-wide")
    assert lines["bulk"].endswith("rate limit 100/60s cluster-wide")
    assert "rate limit" not in lines["plain"]


async def test_a_worker_asks_for_per_key_windows() -> None:
    app = make_app()
    worker = Worker(app.runtime, concurrency=4)
    request = worker._claim_request(4)
    assert dict(request.key_rate_limits) == {"call": RateLimit(10, 1.0)}
    assert dict(request.rate_limits) == {"bulk": RateLimit(100, 60.0)}

"""An HTTP client for ``create_app`` on a real SQLite file, through httpx's ASGI
transport, with the app's lifespan run as uvicorn would run it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from conveyor.app import Conveyor
from conveyor.context import JobContext
from conveyor.retry import Backoff
from conveyor.server import create_app

READ = "read-token"
ENQUEUE = "enqueue-token"
ADMIN = "admin-token"
TOKENS = {READ: ["read"], ENQUEUE: ["enqueue"], ADMIN: ["admin"]}


def make_app(url: str, **settings: Any) -> Conveyor:
    settings.setdefault("api_tokens", TOKENS)
    app = Conveyor(url, **settings)

    @app.task("add")
    async def add(ctx: JobContext, a: int, b: int) -> int:
        return a + b

    @app.task("fail", attempts=1, backoff=Backoff.fixed(0.01), circuit_threshold=2)
    async def fail(ctx: JobContext) -> None:
        raise RuntimeError("nope")

    @app.task("mail.send", queue="emails")
    async def send(ctx: JobContext, to: str) -> str:
        return to

    @app.task("api.call", rate_limit="50/s", rate_limit_key="tenant")
    async def call(ctx: JobContext) -> None: ...

    return app


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


Serve = Callable[..., Awaitable[tuple[Conveyor, httpx.AsyncClient]]]


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Serve]:
    """``await serve(**settings)``: a served app on a fresh SQLite file and a client."""
    opened: list[Any] = []

    async def start(url: str | None = None, **settings: Any) -> tuple[Conveyor, httpx.AsyncClient]:
        app = make_app(url or f"sqlite:///{tmp_path / f'jobs{len(opened)}.db'}", **settings)
        web = create_app(app)
        lifespan = web.router.lifespan_context(web)
        await lifespan.__aenter__()
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web), base_url="http://localhost"
        )
        opened.append((lifespan, client))
        return app, client

    yield start
    for lifespan, client in reversed(opened):
        await client.aclose()
        await lifespan.__aexit__(None, None, None)


@pytest.fixture
async def served(serve: Serve) -> tuple[Conveyor, httpx.AsyncClient]:
    return await serve()

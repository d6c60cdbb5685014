"""The dashboard served by ``create_app`` on a real SQLite file, reached through
httpx's ASGI transport (cookies kept per client), with the app's lifespan run
as uvicorn runs it. The browser tests (test_browser.py) use a real
``conveyor serve`` process instead."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from conveyor.app import Conveyor
from conveyor.server import create_app

from .apps.shop import build

READ = "read-token"
ADMIN = "admin-token"
ENQUEUE = "enqueue-token"
TOKENS = {READ: ["read"], ADMIN: ["admin"], ENQUEUE: ["enqueue"]}

Serve = Callable[..., Awaitable[tuple[Conveyor, httpx.AsyncClient]]]


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Serve]:
    """``await serve(**settings)``: the shop app served on a fresh SQLite file,
    with a cookie-keeping client (not signed in)."""
    opened: list[Any] = []

    async def start(**settings: Any) -> tuple[Conveyor, httpx.AsyncClient]:
        settings.setdefault("api_tokens", TOKENS)
        app = build(f"sqlite:///{tmp_path / f'jobs{len(opened)}.db'}", **settings)
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


def rows_of(html: str, table: str) -> list[list[str]]:
    """The body rows of the table marked ``table``, as text cells."""
    found = re.search(rf"<table[^>]*{table}[^>]*>(.*?)</table>", html, re.S)
    assert found, f"no table {table} on the page"
    body = found.group(1).split("</thead>", 1)[1]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)
    cells = [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S) for row in rows]
    return [[re.sub(r"<[^>]+>", "", cell).strip() for cell in row] for row in cells]


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "the page has no CSRF token"
    return found.group(1)


async def sign_in(client: httpx.AsyncClient, token: str) -> httpx.Response:
    form = await client.get("/sign-in")
    assert form.status_code == 200
    return await client.post(
        "/sign-in", data={"token": token, "csrf_token": csrf_of(form.text), "next": "/"}
    )


async def signed_in(
    serve: Serve, token: str = ADMIN, **settings: Any
) -> tuple[Conveyor, httpx.AsyncClient]:
    app, client = await serve(**settings)
    response = await sign_in(client, token)
    assert response.status_code == 303, response.text
    return app, client


async def post_action(
    client: httpx.AsyncClient, page: str, action: str, data: dict[str, Any]
) -> httpx.Response:
    """POST ``data`` to ``action`` with the CSRF token of ``page`` (as a browser would)."""
    token = csrf_of((await client.get(page)).text)
    return await client.post(action, data={"csrf_token": token, **data})

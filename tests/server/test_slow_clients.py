"""A client that goes away mid-body is no internal error (nothing logged at
ERROR), and one whose body trickles in too slowly gets 408 instead of holding
its connection forever."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from starlette.types import ASGIApp, Message

from .conftest import ENQUEUE, Serve

BODY = b'{"task": "add", "payload": {"a": 1, "b": 2}}'


def post_scope() -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/jobs",
        "raw_path": b"/api/v1/jobs",
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"localhost"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(BODY)).encode()),
            (b"authorization", f"Bearer {ENQUEUE}".encode()),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }


async def call(web: ASGIApp, then: Message | None) -> list[Message]:
    """POST half the body, then ``then`` (``None``: nothing more, ever)."""
    sent: list[Message] = []
    parts: list[Message] = [{"type": "http.request", "body": BODY[:10], "more_body": True}]

    async def receive() -> Message:
        if parts:
            return parts.pop(0)
        if then is None:
            await asyncio.sleep(3600)
        assert then is not None
        return then

    async def send(message: Message) -> None:
        sent.append(message)

    await web(post_scope(), receive, send)
    return sent


async def test_a_client_gone_mid_body_is_not_an_error(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    app, client = await serve()
    web = client._transport.app  # type: ignore[attr-defined]
    with caplog.at_level(logging.INFO):
        await call(web, {"type": "http.disconnect"})
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
    assert await app.count_jobs() == 0


async def test_a_body_that_stops_coming_gets_408(serve: Serve) -> None:
    app, client = await serve(request_read_timeout=0.2)
    web = client._transport.app  # type: ignore[attr-defined]
    sent = await asyncio.wait_for(call(web, None), timeout=5)
    assert sent[0]["type"] == "http.response.start"
    assert sent[0]["status"] == 408
    assert await app.count_jobs() == 0


async def test_a_client_gone_mid_form_is_not_an_error(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    _, client = await serve()
    web = client._transport.app  # type: ignore[attr-defined]
    scope = post_scope()
    scope["path"] = scope["raw_path"] = "/sign-in"
    scope["raw_path"] = b"/sign-in"
    scope["headers"] = [
        (b"host", b"localhost"),
        (b"content-type", b"application/x-www-form-urlencoded"),
        (b"content-length", b"100"),
    ]
    parts: list[Message] = [
        {"type": "http.request", "body": b"token=abc", "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> Message:
        return parts.pop(0) if parts else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        pass

    with caplog.at_level(logging.INFO):
        await web(scope, receive, send)
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []

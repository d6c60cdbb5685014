"""A client's own mistakes never make the service log an ERROR (issue 19,
finding 8): malformed bodies, wrong types, unknown fields, huge numbers and bad
ids, sent to every endpoint of the OpenAPI document (and the dashboard's
forms), get a 4xx answer and at most a warning in the log. An ERROR, or an
exception escaping the application (uvicorn logs those with a traceback), is a
failure."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from conveyor.app import Conveyor
from conveyor.errors import InvalidWorkflow, SerializationError, ValidationError
from conveyor.server import create_app
from conveyor.server.errors import for_exception

from .conftest import ADMIN, Serve, auth, make_app

#: Path segments a client may send as an id or a name.
BAD_IDS = [
    "nope",
    "x" * 300,
    "%00",
    "%ff%fe",
    "..%2F..%2Fetc",
    "%C3%A9t%C3%A9",
    "1e400",
    "-1",
    "9" * 400,
    "%20",
    "a%0Ab",
]

#: Bodies sent as JSON (Content-Type: application/json) to every POST/DELETE.
DEEP = b"[" * 5000 + b"]" * 5000
BAD_BODIES: list[bytes] = [
    b"",
    b"{",
    b"\xff\xfe\x00",
    b"[]",
    b"null",
    b'"text"',
    b"1e400",
    b"9" * 5000,
    b'{"unknown_field": 1}',
    b'{"task": 5}',
    b'{"task": null}',
    b'{"task": "add", "payload": ' + DEEP + b"}",
    b'{"task": "add", "metadata": ' + DEEP + b"}",
    b'{"task": "add", "priority": ' + b"9" * 400 + b"}",
    b'{"task": "add", "priority": 1e400}',
    b'{"task": "add", "attempts": -' + b"9" * 40 + b"}",
    b'{"task": "add", "delay": "forever"}',
    b'{"task": "add", "delay": "9999999999999999999999h"}',
    b'{"task": "add", "delay": -1}',
    b'{"task": "add", "run_at": "not a date"}',
    b'{"task": "add", "run_at": "9999-12-31T23:59:59+14:00"}',
    b'{"task": "add", "timeout": "1e400s"}',
    b'{"task": "add", "ttl": [1]}',
    b'{"task": "add", "queue": "a\\u0000b"}',
    b'{"task": "add", "idempotency_key": ""}',
    b'{"task": "add", "payload": {"a": "\\ud800"}}',
    b'{"task": "add", "payload": {"a": ' + b"9" * 4000 + b"}}",
    b'{"task": "add", "worker": "' + b"w" * 1000 + b'"}',
    b'{"cron": 5}',
    b'{"cron": "* * * * * * * *"}',
    b'{"cron": "61 25 32 13 8"}',
    b'{"every": "-1s"}',
    b'{"every": 1e308}',
    b'{"cron": "* * * * *", "every": "1m"}',
    b'{"older_than": "1e400"}',
    b'{"older_than": 1e308}',
    b'{"reason": "bogus"}',
    b'{"all": "yes"}',
]

#: Query strings (as sent, percent-encoded) sent to every GET.
BAD_QUERIES: list[str] = [
    "limit=abc",
    "limit=" + "9" * 400,
    "limit=1e400",
    "offset=-1",
    "offset=" + "9" * 40,
    "limit=1&limit=2",
    "unknown=1",
    "state=bogus",
    "reason=%00",
    "queue=" + "x" * 1000,
    "next=-5",
    "next=" + "9" * 400,
    "task=%ff%fe",
    "%ff=1",
    "=&&=",
]


def _paths(document: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(method, concrete path) for every operation, each path parameter filled
    with every bad id in turn."""
    for template, operations in document["paths"].items():
        for method in operations:
            if "{" not in template:
                yield method.upper(), template
                continue
            for bad in BAD_IDS:
                head, _, tail = template.partition("{")
                yield method.upper(), head + bad + tail.partition("}")[2]


async def _served(serve: Serve) -> tuple[Conveyor, httpx.AsyncClient]:
    app, client = await serve()
    app.schedule("tick", every="1h", task="add", payload={"a": 1, "b": 1})
    await app.scheduler().sync()
    return app, client


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.name} {r.levelname}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.ERROR
    ]


async def test_malformed_requests_to_every_endpoint_log_no_error(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    app, client = await _served(serve)
    document = (await client.get("/api/v1/openapi.json", headers=auth(ADMIN))).json()
    # Real names too: a bad body must reach the endpoints that read one.
    document["paths"]["/api/v1/schedules/tick/cron"] = {"post": {}}
    document["paths"]["/api/v1/queues/default/pause"] = {"post": {}}
    job = await app.enqueue("add", {"a": 1, "b": 2})
    document["paths"][f"/api/v1/jobs/{job.id}/retry"] = {"post": {}}
    answers: dict[tuple[str, str], int] = {}
    caplog.set_level(logging.DEBUG)
    sent = 0
    for method, path in _paths(document):
        if method == "GET":
            for query in BAD_QUERIES:
                url = f"{path}?{query}"
                response = await client.get(url, headers=auth(ADMIN))
                answers[(method, url)] = response.status_code
                sent += 1
            continue
        for body in BAD_BODIES:
            response = await client.request(
                method,
                path,
                content=body,
                headers={**auth(ADMIN), "Content-Type": "application/json"},
            )
            answers[(method, f"{path} {body[:60]!r}")] = response.status_code
            sent += 1
        for content_type in ("text/plain", "application/json; charset=latin-1", "multipart/x"):
            response = await client.request(
                method, path, content=b"a=1", headers={**auth(ADMIN), "Content-Type": content_type}
            )
            answers[(method, f"{path} as {content_type}")] = response.status_code
            sent += 1
    assert sent > 1000
    server_errors = {where: status for where, status in answers.items() if status >= 500}
    assert server_errors == {}
    assert _errors(caplog) == []
    # The app still answers, and stored nothing from those bodies.
    assert (await client.get("/health/live")).status_code == 200
    assert await app.count_jobs() == 1


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer " + "t" * 10_000},
        {"Authorization": "Basic Zm9vOmJhcg=="},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer \u00e9t\u00e9"},
        {"Content-Length": "abc"},
        {"Content-Type": "application/json", "Content-Length": "999999999999999999999"},
        {"Host": "a" * 2000},
        {"Origin": "null", "Sec-Fetch-Site": "cross-site"},
        {"Cookie": "conveyor_session=" + "%ff" * 100},
    ],
    ids=lambda headers: "+".join(headers),
)
async def test_malformed_headers_log_no_error(
    serve: Serve, caplog: pytest.LogCaptureFixture, headers: dict[str, str]
) -> None:
    _, client = await serve()
    caplog.set_level(logging.DEBUG)
    for method, path in [("GET", "/api/v1/jobs"), ("POST", "/api/v1/jobs"), ("GET", "/")]:
        try:
            response = await client.request(method, path, headers=headers, content=b"{}")
        except (httpx.LocalProtocolError, UnicodeEncodeError):
            continue  # the client itself refuses to send it: nothing reached the service
        assert response.status_code < 500, (method, path, response.text)
    assert _errors(caplog) == []


async def test_dashboard_forms_with_malformed_bodies_log_no_error(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    _, client = await serve()
    caplog.set_level(logging.DEBUG)
    bodies: list[tuple[bytes, str]] = [
        (b"\xff\xfe=\xff", "application/x-www-form-urlencoded"),
        (b"token=" + b"a" * 100_000, "application/x-www-form-urlencoded"),
        (b"--x\r\nbroken", "multipart/form-data; boundary=x"),
        (b"{}", "application/json"),
    ]
    paths = ["/sign-in", "/jobs/actions", "/dead-letters/purge", "/queues/pause", "/sign-out"]
    for path, (body, content_type) in itertools.product(paths, bodies):
        response = await client.post(path, content=body, headers={"Content-Type": content_type})
        assert response.status_code < 500, (path, body[:40], response.text[:200])
    for bad in BAD_IDS:
        response = await client.get(f"/jobs/{bad}")
        assert response.status_code < 500
        response = await client.get(f"/static/{bad}")
        assert response.status_code < 500
    assert _errors(caplog) == []


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("bad"),
        TypeError("bad"),
        OverflowError("int too large"),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        InvalidWorkflow("a cycle"),
        ValidationError("n: not an int"),
        SerializationError("not JSON"),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_client_errors_are_4xx_without_an_error_record(
    exc: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    assert 400 <= for_exception(exc).status_code < 500
    assert _errors(caplog) == []


def test_an_internal_error_is_still_a_500_logged_as_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    assert for_exception(KeyError("a bug")).status_code == 500
    assert len(_errors(caplog)) == 1


async def test_dashboard_pages_with_bad_queries_log_no_error(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    app, client = await serve(api_tokens={})  # no tokens: every local visitor is admin
    app.schedule("tick", every="1h", task="add", payload={"a": 1, "b": 1})
    await app.scheduler().sync()
    caplog.set_level(logging.DEBUG)
    pages = ["/", "/jobs", "/dead-letters", "/queues", "/schedules", "/workers", "/circuits"]
    pages += [f"/jobs/{bad}" for bad in BAD_IDS]
    extra = [
        "page=-1",
        "page=" + "9" * 400,
        "offset=" + "9" * 40,
        "window=" + "9" * 40,
        "since=1e400",
    ]
    for path, query in itertools.product(pages, BAD_QUERIES + extra):
        response = await client.get(f"{path}?{query}")
        assert response.status_code < 500, (path, query, response.text[:300])
    assert _errors(caplog) == []


async def _raising_app(exc: Exception) -> httpx.AsyncClient:
    """The service with one more route, outside every endpoint wrapper, that
    raises ``exc``: what a request meets when an error escapes an endpoint."""

    async def boom(request: Request) -> Response:
        raise exc

    web = create_app(make_app("memory://"))
    web.router.routes.append(Route("/boom", boom))
    # raise_app_exceptions: an exception reaching the server fails the request
    # here, as uvicorn would log it with a traceback.
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=web, raise_app_exceptions=True),
        base_url="http://localhost",
    )


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (ValueError("bad id"), "invalid_value"),
        (InvalidWorkflow("unknown dependency"), "invalid_workflow"),  # its own type
        (OverflowError("too large"), "invalid_value"),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else "",
)
async def test_a_client_error_escaping_an_endpoint_is_answered_not_raised(
    exc: Exception, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with await _raising_app(exc) as client:
        response = await client.get("/boom")
    assert response.status_code == 422
    assert response.json()["error"] == {"type": kind, "message": str(exc)}
    assert _errors(caplog) == []


async def test_an_internal_error_escaping_an_endpoint_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with await _raising_app(KeyError("a bug")) as client:
        response = await client.get("/boom")
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "internal_error"
    assert len(_errors(caplog)) == 1

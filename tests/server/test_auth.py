"""Bearer tokens and scopes, on every operation of the OpenAPI document: no
token or an unknown one is 401, a token without the scope 403, the right one 2xx."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from conveyor.app import Conveyor
from conveyor.server.openapi import document

from .conftest import ADMIN, ENQUEUE, READ, Serve, auth

OPERATIONS = [
    (method.upper(), path, op)
    for path, item in document()["paths"].items()
    for method, op in item.items()
]
OPEN = {"/health/live", "/health/startup", "/health/ready", "/api/v1/openapi.json"}
#: A token of each scope, and which scopes it holds (admin holds them all).
GRANTS = {READ: {"read"}, ENQUEUE: {"enqueue"}, ADMIN: {"read", "enqueue", "admin"}}


#: The POSTs an ``enqueue`` token may make (a step is a job's body too).
ENQUEUE_PATHS = {"/api/v1/jobs", "/api/v1/workflows"}


def needed_scope(op: dict[str, Any]) -> str | None:
    security = op["security"]
    return security[0]["bearer"][0] if security else None


async def prepared(app: Conveyor) -> dict[str, str]:
    """Objects for every path parameter, so the allowed call can succeed."""
    app.schedule("tick", every="1h", task="add", payload={"a": 1, "b": 1})
    await app.scheduler().sync()
    failed = await app.enqueue("fail")
    await app.drain()
    workflow = await app.start(app.step("add", {"a": 1, "b": 1}))
    return {"job_id": failed.id, "name": "tick", "task": "fail", "workflow_id": workflow.id}


def request_for(method: str, path: str, ids: dict[str, str]) -> tuple[str, str, Any]:
    url = path
    for key, value in ids.items():
        url = url.replace("{" + key + "}", value)
    if path == "/api/v1/queues/{name}/pause" or path == "/api/v1/queues/{name}/resume":
        url = path.replace("{name}", "default")
    body: Any = None
    if path in ENQUEUE_PATHS and method == "POST":
        body = {"task": "add", "payload": {"a": 1, "b": 2}}
    elif path == "/api/v1/dlq/purge":
        body = {"task": "fail"}
    elif path.endswith("/cron"):
        body = {"every": "5m"}
    return method, url, body


def test_every_route_is_documented_and_protected_as_designed() -> None:
    open_ops = {path for _, path, op in OPERATIONS if needed_scope(op) is None}
    assert open_ops == OPEN
    for method, path, op in OPERATIONS:
        scope = needed_scope(op)
        if path in OPEN:
            continue
        if method == "GET":
            assert scope == "read", path
        elif path in ENQUEUE_PATHS:
            assert scope == "enqueue"
        else:
            assert scope == "admin", (method, path)


@pytest.mark.parametrize(("method", "path", "op"), OPERATIONS, ids=lambda v: str(v)[:40])
async def test_auth_matrix(serve: Serve, method: str, path: str, op: dict[str, Any]) -> None:
    app, client = await serve()
    ids = await prepared(app)
    method, url, body = request_for(method, path, ids)
    scope = needed_scope(op)

    async def call(headers: dict[str, str]) -> httpx.Response:
        return await client.request(method, url, json=body, headers=headers)

    if scope is None:
        assert (await call({})).status_code == 200
        return
    missing = await call({})
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["error"]["type"] == "unauthorized"
    assert (await call(auth("not-a-token"))).status_code == 401
    assert (await call({"Authorization": f"Basic {READ}"})).status_code == 401
    for token, scopes in GRANTS.items():
        if scope not in scopes:
            refused = await call(auth(token))
            assert refused.status_code == 403, (token, refused.text)
            assert scope in refused.json()["error"]["message"]
    allowed = [token for token, scopes in GRANTS.items() if scope in scopes]
    response = await call(auth(allowed[0]))
    assert 200 <= response.status_code < 300, (url, response.text)


async def test_without_configured_tokens_everything_is_open(serve: Serve) -> None:
    _, client = await serve(api_tokens={})
    assert (await client.get("/api/v1/jobs")).status_code == 200
    assert (await client.get("/metrics")).status_code == 200
    created = await client.post("/api/v1/jobs", json={"task": "add", "payload": {"a": 1, "b": 2}})
    assert created.status_code == 201

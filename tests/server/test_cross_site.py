"""Cross-site requests and DNS rebinding, mostly in the no-token mode where no
bearer token stands in the way: a page on another site must not be able to
enqueue, purge or pause through a visitor's browser, nor read the service
under a rebound host name."""

from __future__ import annotations

import pytest

from .conftest import ADMIN, Serve, auth

EVIL = {"Origin": "https://evil.example"}
PLAIN = {"Content-Type": "text/plain"}
ENQUEUE = b'{"task": "add", "payload": {"a": 1, "b": 2}}'


async def test_cross_site_posts_change_nothing_without_a_token(serve: Serve) -> None:
    app, client = await serve(api_tokens={})
    failed = await app.enqueue("fail")
    await app.drain()

    enqueued = await client.post("/api/v1/jobs", content=ENQUEUE, headers={**EVIL, **PLAIN})
    assert enqueued.status_code == 403, enqueued.text
    assert enqueued.json()["error"]["type"] == "cross_site_request"
    purged = await client.post("/api/v1/dlq/purge", content=b'{"all": true}', headers=EVIL)
    assert purged.status_code == 403
    paused = await client.post("/api/v1/queues/default/pause", headers=EVIL)
    assert paused.status_code == 403
    fetched = await client.post(
        "/api/v1/jobs", json={"task": "add"}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert fetched.status_code == 403
    signed_out = await client.post("/sign-out", headers=EVIL, data={"csrf_token": "x"})
    assert signed_out.status_code == 403

    assert [job.id for job in await app.list_jobs()] == [failed.id]
    assert (await app.get_job(failed.id)).state == "failed"
    assert not {q.name: q.paused for q in await app.queues()}.get("default", False)


async def test_json_endpoints_need_a_json_content_type(serve: Serve) -> None:
    app, client = await serve(api_tokens={})
    plain = await client.post("/api/v1/jobs", content=ENQUEUE, headers=PLAIN)
    assert plain.status_code == 415, plain.text
    undeclared = await client.post("/api/v1/jobs", content=ENQUEUE)
    assert undeclared.status_code == 415
    form = await client.post("/api/v1/queues/default/pause", data={"a": "1"})
    assert form.status_code == 415
    assert await app.list_jobs() == []
    declared = await client.post(
        "/api/v1/jobs", content=ENQUEUE, headers={"Content-Type": "application/json; charset=utf-8"}
    )
    assert declared.status_code == 201


async def test_own_origin_and_typed_requests_pass(serve: Serve) -> None:
    _, client = await serve(api_tokens={})
    for headers in (
        {"Origin": "http://localhost"},
        {"Sec-Fetch-Site": "same-origin"},
        {"Sec-Fetch-Site": "none"},
        {},
    ):
        response = await client.post("/api/v1/jobs", json={"task": "add"}, headers=headers)
        assert response.status_code == 201, (headers, response.text)


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8000", "10.0.0.1", "localhost.evil"]
)
async def test_a_foreign_host_is_refused_without_a_token(serve: Serve, host: str) -> None:
    _, client = await serve(api_tokens={})
    for path in ("/api/v1/queues", "/", "/metrics"):
        response = await client.get(path, headers={"Host": host})
        assert response.status_code == 421, (path, response.text)


@pytest.mark.parametrize(
    "host", ["localhost", "localhost:8000", "127.0.0.1:8000", "[::1]:9", "a.localhost"]
)
async def test_loopback_hosts_are_served_without_a_token(serve: Serve, host: str) -> None:
    _, client = await serve(api_tokens={})
    response = await client.get("/api/v1/queues", headers={"Host": host})
    assert response.status_code == 200, response.text


async def test_with_tokens_any_host_is_served_but_not_another_origin(serve: Serve) -> None:
    _, client = await serve()
    served = await client.get("/api/v1/queues", headers={"Host": "jobs.example", **auth(ADMIN)})
    assert served.status_code == 200
    crossed = await client.post(
        "/api/v1/jobs", json={"task": "add"}, headers={**EVIL, **auth(ADMIN)}
    )
    assert crossed.status_code == 403

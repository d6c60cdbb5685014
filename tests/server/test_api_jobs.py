"""``/api/v1/jobs`` and ``/api/v1/dlq``: every operation, and bad input as 4xx
with ``{"error": {"type", "message"}}``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import orjson

from conveyor.app import Conveyor
from conveyor.backends.base import QueueInfo

from .conftest import ADMIN, ENQUEUE, READ, Serve, auth


def error_of(response: httpx.Response) -> dict[str, str]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"type", "message"}
    assert body["error"]["message"]
    error: dict[str, str] = body["error"]
    return error


async def test_enqueue_get_list_and_filter(served: tuple[Conveyor, httpx.AsyncClient]) -> None:
    app, client = served
    created = await client.post(
        "/api/v1/jobs",
        json={
            "task": "add",
            "payload": {"a": 1, "b": 2},
            "priority": 5,
            "tenant": "org-1",
            "metadata": {"correlation_id": "req-9"},
            "delay": "1h",
        },
        headers=auth(ENQUEUE),
    )
    assert created.status_code == 201, created.text
    job = created.json()
    assert job["task"] == "add"
    assert job["payload"] == {"a": 1, "b": 2}
    assert job["state"] == "delayed"
    assert job["priority"] == 5
    assert job["tenant"] == "org-1"
    await app.enqueue("mail.send", {"to": "x@y.z"})

    got = await client.get(f"/api/v1/jobs/{job['id']}", headers=auth(READ))
    assert got.status_code == 200
    assert got.json()["metadata"] == {"correlation_id": "req-9"}

    everything = (await client.get("/api/v1/jobs", headers=auth(READ))).json()
    assert everything["total"] == 2
    assert len(everything["jobs"]) == 2
    for query, expected in (
        ({"state": "delayed"}, ["add"]),
        ({"queue": "emails"}, ["mail.send"]),
        ({"task": "add"}, ["add"]),
        ({"tenant": "org-1"}, ["add"]),
        ({"state": "failed"}, []),
    ):
        page = (await client.get("/api/v1/jobs", params=query, headers=auth(READ))).json()
        assert [j["task"] for j in page["jobs"]] == expected, query
        assert page["total"] == len(expected)
    page = (
        await client.get("/api/v1/jobs", params={"limit": 1, "offset": 1}, headers=auth(READ))
    ).json()
    assert (page["total"], len(page["jobs"]), page["limit"], page["offset"]) == (2, 1, 1, 1)


async def test_idempotent_enqueue_answers_200_with_the_same_job(
    served: tuple[Conveyor, httpx.AsyncClient],
) -> None:
    _, client = served
    body = {"task": "add", "payload": {"a": 1, "b": 1}, "idempotency_key": "k-1"}
    first = await client.post("/api/v1/jobs", json=body, headers=auth(ENQUEUE))
    second = await client.post("/api/v1/jobs", json=body, headers=auth(ENQUEUE))
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json()["id"] == first.json()["id"]
    assert second.json()["duplicate"] is True


async def test_enqueue_takes_the_flow_control_options(
    served: tuple[Conveyor, httpx.AsyncClient],
) -> None:
    app, client = served
    body = {
        "task": "add",
        "payload": {"a": 1, "b": 1},
        "idempotency_key": "k-2",
        "idempotency_ttl": "1h",
        "concurrency_key": "acct-7",
        "debounce": "30s",
    }
    first = await client.post("/api/v1/jobs", json=body, headers=auth(ENQUEUE))
    later = {**body, "payload": {"a": 2, "b": 2}}
    second = await client.post("/api/v1/jobs", json=later, headers=auth(ENQUEUE))
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["concurrency_key"] == "acct-7"
    assert first.json()["state"] == "delayed"
    stored = await app.get_job(first.json()["id"])
    assert stored is not None
    assert stored.payload == {"a": 2, "b": 2}
    no_key = await client.post(
        "/api/v1/jobs", json={"task": "add", "debounce": "5s"}, headers=auth(ENQUEUE)
    )
    assert no_key.status_code == 422
    assert "debounce needs an idempotency_key" in error_of(no_key)["message"]


async def test_enqueue_takes_a_rate_limit_key(
    served: tuple[Conveyor, httpx.AsyncClient],
) -> None:
    app, client = served
    body = {"task": "api.call", "tenant": "org-1", "rate_limit_key": "key-9"}
    made = await client.post("/api/v1/jobs", json=body, headers=auth(ENQUEUE))
    assert made.status_code == 201
    assert made.json()["rate_limit_key"] == "key-9"
    from_tenant = await client.post(
        "/api/v1/jobs", json={"task": "api.call", "tenant": "org-1"}, headers=auth(ENQUEUE)
    )
    assert from_tenant.json()["rate_limit_key"] == "org-1"
    refused = await client.post(
        "/api/v1/jobs", json={"task": "add", "rate_limit_key": "k"}, headers=auth(ENQUEUE)
    )
    assert refused.status_code == 422
    assert "'add' has no rate_limit" in error_of(refused)["message"]
    assert await app.count_jobs() == 2


async def test_cancel_retry_and_delete(served: tuple[Conveyor, httpx.AsyncClient]) -> None:
    app, client = served
    waiting = await app.enqueue("add", {"a": 1, "b": 2})
    cancelled = await client.post(f"/api/v1/jobs/{waiting.id}/cancel", headers=auth(ADMIN))
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "cancelled"

    failing = await app.enqueue("fail")
    await app.drain()
    retried = await client.post(f"/api/v1/jobs/{failing.id}/retry", headers=auth(ADMIN))
    assert retried.status_code == 201, retried.text
    assert retried.json()["retry_of"] == failing.id
    assert retried.json()["state"] == "waiting"
    for path in (f"/api/v1/jobs/{failing.id}/retry", f"/api/v1/dlq/{failing.id}/retry"):
        again = await client.post(path, headers=auth(ADMIN))
        assert again.status_code == 200, again.text  # the same retry, nothing new
        assert (again.json()["id"], again.json()["duplicate"]) == (retried.json()["id"], True)
    assert await app.count_jobs(task="fail") == 2

    not_failed = await client.post(f"/api/v1/jobs/{waiting.id}/retry", headers=auth(ADMIN))
    assert not_failed.status_code == 409
    assert error_of(not_failed)["type"] == "invalid_state"

    deleted = await client.delete(f"/api/v1/jobs/{waiting.id}", headers=auth(ADMIN))
    assert deleted.json() == {"deleted": waiting.id}
    assert await app.get_job(waiting.id) is None
    again = await client.delete(f"/api/v1/jobs/{waiting.id}", headers=auth(ADMIN))
    assert again.status_code == 404


async def test_dead_letters_list_retry_delete_purge(
    served: tuple[Conveyor, httpx.AsyncClient],
) -> None:
    app, client = served
    jobs = [await app.enqueue("fail", tenant=f"t{i % 2}") for i in range(4)]
    await app.drain()
    page = (await client.get("/api/v1/dlq", headers=auth(READ))).json()
    assert page["total"] == 4
    assert {j["failure_reason"] for j in page["jobs"]} == {"error"}
    only = (await client.get("/api/v1/dlq", params={"tenant": "t1"}, headers=auth(READ))).json()
    assert only["total"] == 2

    retried = await client.post(f"/api/v1/dlq/{jobs[0].id}/retry", headers=auth(ADMIN))
    assert retried.status_code == 201
    deleted = await client.delete(f"/api/v1/dlq/{jobs[1].id}", headers=auth(ADMIN))
    assert deleted.status_code == 200
    assert await app.get_job(jobs[1].id) is None

    refused = await client.post("/api/v1/dlq/purge", json={}, headers=auth(ADMIN))
    assert refused.status_code == 422
    assert "all" in error_of(refused)["message"]
    assert await app.dlq.count() == 3  # jobs[0] (retried, still failed), jobs[2], jobs[3]

    purged = await client.post("/api/v1/dlq/purge", json={"tenant": "t0"}, headers=auth(ADMIN))
    assert purged.json() == {"deleted": 2}  # jobs[0] and jobs[2]
    purged = await client.post("/api/v1/dlq/purge", json={"all": True}, headers=auth(ADMIN))
    assert purged.json() == {"deleted": 1}
    assert await app.dlq.count() == 0


async def test_bad_input_is_a_4xx_with_a_clear_message_and_stores_nothing(
    served: tuple[Conveyor, httpx.AsyncClient],
) -> None:
    app, client = served
    headers = {**auth(ENQUEUE), "Content-Type": "application/json"}
    cases: list[tuple[bytes, int, str, str]] = [
        (b'{"task": "add", "payload": ', 400, "invalid_json", "not valid JSON"),
        (b"", 400, "invalid_json", "JSON body"),
        (b"[1, 2]", 422, "invalid_body", "JSON object"),
        (b'{"payload": {}}', 422, "invalid_body", "task"),
        (b'{"task": 42}', 422, "invalid_body", "task"),
        (b'{"task": "add", "priority": "high"}', 422, "invalid_body", "priority"),
        (b'{"task": "add", "attempts": 0}', 422, "invalid_body", "attempts"),
        (b'{"task": "add", "surprise": 1}', 422, "invalid_body", "surprise"),
        (b'{"task": "add", "delay": "soon"}', 422, "invalid_value", "soon"),
        (b'{"task": "nope"}', 422, "unknown_task", "nope"),
        (b'{"task": "add", "payload": [1, 2]}', 422, "invalid_value", "JSON object"),
        (b'{"task": "add", "payload": "a@b.c"}', 422, "invalid_value", "not a string"),
    ]
    for body, status, type_, words in cases:
        response = await client.post("/api/v1/jobs", content=body, headers=headers)
        assert response.status_code == status, (body, response.text)
        error = error_of(response)
        assert error["type"] == type_, (body, error)
        assert words in error["message"], (body, error)
    assert await app.count_jobs() == 0

    unknown = await client.get("/api/v1/jobs/01NOSUCHJOB0000000000000000", headers=auth(READ))
    assert unknown.status_code == 404
    assert "01NOSUCHJOB" in error_of(unknown)["message"]
    bad_state = await client.get("/api/v1/jobs", params={"state": "done"}, headers=auth(READ))
    assert bad_state.status_code == 422
    assert "state" in error_of(bad_state)["message"]
    bad_limit = await client.get("/api/v1/jobs", params={"limit": "-1"}, headers=auth(READ))
    assert bad_limit.status_code == 422
    nowhere = await client.get("/api/v1/nothing-here", headers=auth(READ))
    assert nowhere.status_code == 404
    assert error_of(nowhere)["type"] == "not_found"
    wrong_method = await client.put("/api/v1/jobs", headers=auth(ADMIN))
    assert wrong_method.status_code == 405


async def test_oversized_body_is_413_and_stores_nothing(serve: Serve) -> None:
    app, client = await serve(max_request_bytes=1000)
    big = {"task": "add", "payload": {"a": "x" * 2000, "b": 1}}
    response = await client.post("/api/v1/jobs", json=big, headers=auth(ENQUEUE))
    assert response.status_code == 413
    assert error_of(response)["type"] == "body_too_large"

    # No Content-Length: the limit still holds while the body streams in.
    async def chunks() -> AsyncIterator[bytes]:
        data = orjson.dumps(big)
        for i in range(0, len(data), 100):
            yield data[i : i + 100]

    streamed = await client.post(
        "/api/v1/jobs",
        content=chunks(),
        headers={**auth(ENQUEUE), "Content-Type": "application/json"},
    )
    assert streamed.status_code == 413
    assert await app.count_jobs() == 0
    small = await client.post("/api/v1/jobs", json={"task": "add"}, headers=auth(ENQUEUE))
    assert small.status_code == 201


async def test_queue_full_is_429(serve: Serve) -> None:
    app, client = await serve()
    await app.backend.configure_queue(QueueInfo("default", max_size=1, ttl=None))
    first = await client.post("/api/v1/jobs", json={"task": "add"}, headers=auth(ENQUEUE))
    second = await client.post("/api/v1/jobs", json={"task": "add"}, headers=auth(ENQUEUE))
    assert (first.status_code, second.status_code) == (201, 429)
    assert error_of(second)["type"] == "queue_full"
    assert await app.count_jobs() == 1


async def test_payload_over_max_payload_bytes_is_413(serve: Serve) -> None:
    app, client = await serve(max_payload_bytes=100)
    body = {"task": "add", "payload": {"a": "y" * 500}}
    response = await client.post("/api/v1/jobs", json=body, headers=auth(ENQUEUE))
    assert response.status_code == 413
    assert error_of(response)["type"] == "payload_too_large"
    assert await app.count_jobs() == 0


async def test_control_characters_in_a_path_are_refused(
    served: tuple[Conveyor, httpx.AsyncClient],
) -> None:
    _, client = served
    response = await client.get("/api/v1/jobs/abc%00def", headers=auth(READ))
    assert response.status_code == 422
    assert error_of(response)["type"] == "invalid_path"

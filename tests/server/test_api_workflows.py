"""``/api/v1/workflows``: start one from JSON, read it, cancel it; bad shapes,
unknown tasks and unknown ids as 4xx with ``{"error": {"type", "message"}}``."""

from __future__ import annotations

from typing import Any

import httpx

from conveyor.app import Conveyor
from conveyor.job import JobState
from conveyor.server.api.models import MAX_WORKFLOW_DEPTH

from .conftest import ADMIN, ENQUEUE, READ, auth
from .test_api_jobs import error_of

DIAMOND = {
    "chain": [
        {"task": "add", "payload": {"a": 1, "b": 2}, "priority": 3},
        {"group": [{"task": "add", "payload": {"a": 2, "b": 2}}, {"task": "mail.send"}]},
        {
            "chord": {
                "group": [{"task": "add", "payload": {"a": 0, "b": 0}, "delay": "1h"}],
                "callback": {"task": "mail.send", "payload": {"to": "x@y.z"}},
            }
        },
    ]
}


async def test_start_a_nested_workflow_then_read_it(
    served: tuple[Conveyor, httpx.AsyncClient],
) -> None:
    app, client = served
    created = await client.post("/api/v1/workflows", json=DIAMOND, headers=auth(ENQUEUE))
    assert created.status_code == 201, created.text
    body = created.json()
    assert set(body) == {"id", "state", "jobs"}
    assert body["state"] == "running"
    jobs = body["jobs"]
    assert [job["task"] for job in jobs] == ["add", "add", "mail.send", "add", "mail.send"]
    assert {job["workflow_id"] for job in jobs} == {body["id"]}
    first, left, right, member, callback = jobs
    assert first["state"] == "waiting"
    assert first["priority"] == 3
    assert left["depends_on"] == [first["id"]]
    assert right["depends_on"] == [first["id"]]
    assert left["state"] == "blocked"
    assert member["depends_on"] == [left["id"], right["id"]]
    assert callback["depends_on"] == [member["id"]]
    assert callback["payload"] == {"to": "x@y.z"}

    got = await client.get(f"/api/v1/workflows/{body['id']}", headers=auth(READ))
    assert got.status_code == 200
    assert [job["id"] for job in got.json()["jobs"]] == [job["id"] for job in jobs]
    stored = await app.get_workflow(body["id"])
    assert stored is not None
    assert len(stored.jobs) == 5


async def test_a_single_step_is_a_workflow_too(
    served: tuple[Conveyor, httpx.AsyncClient],
) -> None:
    _, client = served
    created = await client.post(
        "/api/v1/workflows", json={"task": "add", "payload": {"a": 1, "b": 1}}, headers=auth(ADMIN)
    )
    assert created.status_code == 201, created.text
    assert [job["state"] for job in created.json()["jobs"]] == ["waiting"]


async def test_cancel_a_workflow(served: tuple[Conveyor, httpx.AsyncClient]) -> None:
    app, client = served
    body = (await client.post("/api/v1/workflows", json=DIAMOND, headers=auth(ENQUEUE))).json()
    path = f"/api/v1/workflows/{body['id']}/cancel"
    refused = await client.post(path, headers=auth(ENQUEUE))
    assert refused.status_code == 403
    cancelled = await client.post(path, headers=auth(ADMIN))
    assert cancelled.status_code == 200, cancelled.text
    answer = cancelled.json()
    assert answer["cancelled"] == 5
    assert answer["state"] == "cancelled"
    stored = await app.get_workflow(body["id"])
    assert stored is not None
    assert {job.state for job in stored.jobs} == {JobState.CANCELLED}
    again = (await client.post(path, headers=auth(ADMIN))).json()
    assert again["cancelled"] == 0


async def test_unknown_workflow_is_404(served: tuple[Conveyor, httpx.AsyncClient]) -> None:
    _, client = served
    for method, path in (
        ("GET", "/api/v1/workflows/nope"),
        ("POST", "/api/v1/workflows/nope/cancel"),
    ):
        response = await client.request(method, path, headers=auth(ADMIN))
        assert response.status_code == 404, path
        assert "nope" in error_of(response)["message"]


async def test_bad_workflows_are_422_and_store_nothing(
    served: tuple[Conveyor, httpx.AsyncClient],
) -> None:
    app, client = served
    deep: dict[str, Any] = {"task": "add"}
    for _ in range(MAX_WORKFLOW_DEPTH + 1):
        deep = {"chain": [deep]}
    cases: list[tuple[Any, str, str]] = [
        ({"chain": [{"task": "add"}, {"task": "nope"}]}, "unknown_task", "'nope'"),
        ({"chain": []}, "invalid_body", "chain: List should have at least 1 item"),
        ({"chain": [{"tsk": "add"}]}, "invalid_body", "chain.0.task: Field required"),
        ({"chord": {"group": [{"task": "add"}]}}, "invalid_body", "chord.callback"),
        ({"group": [{"task": "add", "delay": "soon"}]}, "invalid_value", "soon"),
        ({"group": [{"task": "add", "priority": "high"}]}, "invalid_body", "group.0.priority"),
        (deep, "invalid_body", f"deeper than {MAX_WORKFLOW_DEPTH}"),
        ([{"task": "add"}], "invalid_body", "JSON object"),
    ]
    for body, kind, message in cases:
        response = await client.post("/api/v1/workflows", json=body, headers=auth(ENQUEUE))
        assert response.status_code == 422, (body, response.text)
        error = error_of(response)
        assert error["type"] == kind, (body, error)
        assert message in error["message"], (body, error)
    assert await app.count_jobs() == 0


async def test_starting_needs_the_enqueue_scope(
    served: tuple[Conveyor, httpx.AsyncClient],
) -> None:
    _, client = served
    response = await client.post("/api/v1/workflows", json=DIAMOND, headers=auth(READ))
    assert response.status_code == 403
    assert (await client.get("/api/v1/workflows/x")).status_code == 401

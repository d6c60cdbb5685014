"""Times and counts no store or view can hold are refused at enqueue, with a
clear 422 from the HTTP API and a ValueError from Python; a job stored with
such values anyway (by an older version) still reads without a server error."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from conveyor.app import Conveyor
from conveyor.backends.base import NewJob
from conveyor.ids import new_id

from .conftest import ENQUEUE, READ, auth

BAD_OPTIONS: list[dict[str, Any]] = [
    {"delay": 1e308},
    {"delay": 2**60},
    {"run_at": 1e20},
    {"run_at": -1},
    {"run_at": 0},
    {"run_at": 2**53 + 1},
    {"timeout": 0},
    {"timeout": 1e300},
    {"ttl": 0},
    {"ttl": "0s"},
    {"ttl": 1e308},
    {"attempts": 2**31},
    {"attempts": 2**53 + 1},
]


@pytest.mark.parametrize("options", BAD_OPTIONS, ids=str)
async def test_out_of_range_options_are_a_422(
    served: tuple[Conveyor, httpx.AsyncClient], options: dict[str, Any]
) -> None:
    app, client = served
    body = {"task": "add", "payload": {"a": 1, "b": 2}, **options}
    response = await client.post("/api/v1/jobs", json=body, headers=auth(ENQUEUE))
    assert response.status_code == 422, response.text
    name = next(iter(options))
    assert name in response.json()["error"]["message"]
    assert await app.count_jobs() == 0


@pytest.mark.parametrize("options", BAD_OPTIONS, ids=str)
async def test_out_of_range_options_raise_in_python(
    served: tuple[Conveyor, httpx.AsyncClient], options: dict[str, Any]
) -> None:
    app, _ = served
    with pytest.raises(ValueError, match=next(iter(options))):
        await app.enqueue("add", {"a": 1, "b": 2}, **options)


async def test_in_range_extremes_are_accepted(served: tuple[Conveyor, httpx.AsyncClient]) -> None:
    _, client = served
    for options in (
        {"delay": 99 * 365 * 86400},
        {"run_at": 253_402_300_799},
        {"timeout": 0.001, "ttl": 0.5},
        {"attempts": 2**31 - 1},
    ):
        body = {"task": "add", "payload": {"a": 1, "b": 2}, **options}
        response = await client.post("/api/v1/jobs", json=body, headers=auth(ENQUEUE))
        assert response.status_code == 201, (options, response.text)
        job = await client.get(f"/api/v1/jobs/{response.json()['id']}", headers=auth(READ))
        assert job.status_code == 200


def stored_out_of_range() -> list[NewJob]:
    """What an older version let through: enqueued straight into the store."""
    common: dict[str, Any] = {"task": "add", "queue": "default", "payload": b"{}"}
    return [
        NewJob(new_id(), run_at=1e20, **common),
        NewJob(new_id(), delay=1e308, **common),
        NewJob(new_id(), timeout=1e308, ttl=1e308, **common),
    ]


async def test_stored_out_of_range_jobs_read_without_error(
    served: tuple[Conveyor, httpx.AsyncClient],
) -> None:
    app, client = served
    jobs = await app.backend.enqueue_jobs(stored_out_of_range())
    for job in jobs:
        response = await client.get(f"/api/v1/jobs/{job.id}", headers=auth(READ))
        assert response.status_code == 200, response.text
    listed = await client.get("/api/v1/jobs", headers=auth(READ))
    assert listed.status_code == 200
    assert len(listed.json()["jobs"]) == 3

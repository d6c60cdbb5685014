"""``/api/v1/queues``: per-queue settings and counts; pause and resume."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from conveyor.app import Conveyor
from conveyor.backends.base import QueueInfo
from conveyor.job import JobState
from conveyor.server.auth import Scope
from conveyor.server.responses import json_response
from conveyor.server.routing import app_of, path_param, route

_ZERO = {state.value: 0 for state in JobState}


async def _queues(app: Conveyor) -> list[dict[str, Any]]:
    infos = {info.name: info for info in await app.queues()}
    counts = await app.stats()
    tenants = await app.tenant_usage()
    rows = []
    for name in sorted(set(infos) | set(counts)):
        row = (infos.get(name) or QueueInfo(name)).to_dict()
        row["counts"] = {**_ZERO, **counts.get(name, {})}
        if name in tenants:  # a fair queue: its busiest tenants
            row["tenants"] = [count.to_dict() for count in tenants[name]]
        rows.append(row)
    return rows


async def list_queues(request: Request) -> Response:
    app = app_of(request)
    keys = [row.to_dict() for row in await app.key_usage()]
    rates = [row.to_dict() for row in await app.rate_usage()]
    return json_response({"queues": await _queues(app), "keys": keys, "rates": rates})


async def _one(app: Conveyor, name: str) -> dict[str, Any]:
    return next(row for row in await _queues(app) if row["name"] == name)


async def pause_queue(request: Request) -> Response:
    name = path_param(request, "name")
    app = app_of(request)
    await app.pause_queue(name)
    return json_response(await _one(app, name))


async def resume_queue(request: Request) -> Response:
    name = path_param(request, "name")
    app = app_of(request)
    await app.resume_queue(name)
    return json_response(await _one(app, name))


ROUTES = [
    route("/api/v1/queues", list_queues, "GET", Scope.READ),
    route("/api/v1/queues/{name}/pause", pause_queue, "POST", Scope.ADMIN),
    route("/api/v1/queues/{name}/resume", resume_queue, "POST", Scope.ADMIN),
]

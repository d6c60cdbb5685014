"""``/api/v1/workers``: workers from their heartbeats, alive or not yet forgotten."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from conveyor.server.auth import Scope
from conveyor.server.responses import json_response
from conveyor.server.routing import app_of, route


async def list_workers(request: Request) -> Response:
    rows = [{**info.to_dict(), "alive": alive} for info, alive in await app_of(request).workers()]
    rows.sort(key=lambda row: (not row["alive"], row["host"], row["started_at"], row["id"]))
    return json_response({"workers": rows})


ROUTES = [route("/api/v1/workers", list_workers, "GET", Scope.READ)]

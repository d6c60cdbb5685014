"""``/api/v1/circuits``: per-task circuit breakers; reset closes one."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from conveyor.server.auth import Scope
from conveyor.server.responses import json_response
from conveyor.server.routing import app_of, path_param, route


async def list_circuits(request: Request) -> Response:
    circuits = await app_of(request).circuits()
    return json_response({"circuits": [c.to_dict() for c in circuits]})


async def reset_circuit(request: Request) -> Response:
    task = path_param(request, "task")
    app = app_of(request)
    await app.reset_circuit(task)
    found = [c.to_dict() for c in await app.circuits() if c.task == task]
    state = found[0] if found else {"task": task, "state": "closed", "failures": 0}
    return json_response(state)


ROUTES = [
    route("/api/v1/circuits", list_circuits, "GET", Scope.READ),
    route("/api/v1/circuits/{task}/reset", reset_circuit, "POST", Scope.ADMIN),
]

"""``/api/v1/schedules``: list, get (with the next fire times), pause, resume,
trigger now and change the cron or interval; all persisted by the scheduler."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from conveyor.server.api.models import CronBody, NextFiresQuery
from conveyor.server.auth import Scope
from conveyor.server.errors import ApiError
from conveyor.server.responses import json_response
from conveyor.server.routing import app_of, path_param, read_body, read_query, route
from conveyor.tracing import caller_context

if TYPE_CHECKING:
    from conveyor.scheduler.admin import Schedules


def _schedules(request: Request) -> Schedules:
    return app_of(request).schedules


async def list_schedules(request: Request) -> Response:
    records = await _schedules(request).list()
    return json_response({"schedules": [record.to_dict() for record in records]})


async def get_schedule(request: Request) -> Response:
    q = read_query(request, NextFiresQuery)
    schedules = _schedules(request)
    name = path_param(request, "name")
    record = await schedules.get(name)
    fires = await schedules.next_fires(name, q.next) if q.next else []
    return json_response({**record.to_dict(), "next_fires": [f.timestamp() for f in fires]})


async def pause_schedule(request: Request) -> Response:
    record = await _schedules(request).pause(path_param(request, "name"))
    return json_response(record.to_dict())


async def resume_schedule(request: Request) -> Response:
    record = await _schedules(request).resume(path_param(request, "name"))
    return json_response(record.to_dict())


async def trigger_schedule(request: Request) -> Response:
    with caller_context(request.headers):
        job = await _schedules(request).trigger(path_param(request, "name"))
    return json_response(job.to_dict(), status=201)


async def set_cron(request: Request) -> Response:
    body = await read_body(request, CronBody)
    if (body.cron is None) == (body.every is None):
        raise ApiError(422, "invalid_body", "give exactly one of `cron` and `every`")
    record = await _schedules(request).set_cron(
        path_param(request, "name"), cron=body.cron, every=body.every
    )
    return json_response(record.to_dict())


ROUTES = [
    route("/api/v1/schedules", list_schedules, "GET", Scope.READ),
    route("/api/v1/schedules/{name}", get_schedule, "GET", Scope.READ),
    route("/api/v1/schedules/{name}/pause", pause_schedule, "POST", Scope.ADMIN),
    route("/api/v1/schedules/{name}/resume", resume_schedule, "POST", Scope.ADMIN),
    route("/api/v1/schedules/{name}/trigger", trigger_schedule, "POST", Scope.ADMIN),
    route("/api/v1/schedules/{name}/cron", set_cron, "POST", Scope.ADMIN),
]

"""``/api/v1/dlq``: dead letters (failed jobs): list, retry, delete, purge."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from conveyor.server.api.jobs import job_page
from conveyor.server.api.models import DeadLetterQuery, PurgeBody
from conveyor.server.auth import Scope
from conveyor.server.errors import ApiError
from conveyor.server.responses import json_response
from conveyor.server.routing import app_of, path_param, read_body, read_query, route


async def list_dead_letters(request: Request) -> Response:
    q = read_query(request, DeadLetterQuery)
    dlq = app_of(request).dlq
    jobs = await dlq.list(q.task, q.queue, q.tenant, q.reason, limit=q.limit, offset=q.offset)
    total = await dlq.count(q.task, q.queue, q.tenant, q.reason)
    return json_response(job_page(jobs, total, q.limit, q.offset))


async def retry_dead_letter(request: Request) -> Response:
    """201 with the new job; 200 with the earlier one if it was retried before."""
    job = await app_of(request).dlq.retry(path_param(request, "job_id"))
    return json_response(job.to_dict(), status=200 if job.duplicate else 201)


async def delete_dead_letter(request: Request) -> Response:
    job_id = path_param(request, "job_id")
    await app_of(request).dlq.delete(job_id)
    return json_response({"deleted": job_id})


async def purge_dead_letters(request: Request) -> Response:
    body = await read_body(request, PurgeBody)
    filters = body.model_dump(exclude={"all"}, exclude_none=True)
    if not filters and not body.all:
        raise ApiError(
            422,
            "invalid_body",
            'give at least one filter, or "all": true to purge every dead letter',
        )
    deleted = await app_of(request).dlq.purge(**filters)
    return json_response({"deleted": deleted})


ROUTES = [
    route("/api/v1/dlq", list_dead_letters, "GET", Scope.READ),
    route("/api/v1/dlq/purge", purge_dead_letters, "POST", Scope.ADMIN),
    route("/api/v1/dlq/{job_id}", delete_dead_letter, "DELETE", Scope.ADMIN),
    route("/api/v1/dlq/{job_id}/retry", retry_dead_letter, "POST", Scope.ADMIN),
]

"""``/api/v1/jobs``: list, get, enqueue (scope ``enqueue``), cancel, retry, delete."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from conveyor.durations import parse_duration
from conveyor.errors import InvalidStateError, JobNotFound
from conveyor.job import Job, JobState
from conveyor.producer import check_task_known
from conveyor.server.api.models import EnqueueBody, JobListQuery
from conveyor.server.auth import Scope
from conveyor.server.responses import json_response
from conveyor.server.routing import app_of, path_param, read_body, read_query, route
from conveyor.tracing import caller_context


def job_page(jobs: list[Job], total: int, limit: int, offset: int) -> dict[str, Any]:
    return {
        "jobs": [job.to_dict() for job in jobs],
        "total": total,
        "limit": limit,
        "offset": offset,
    }


async def list_jobs(request: Request) -> Response:
    q = read_query(request, JobListQuery)
    app = app_of(request)
    filters: dict[str, Any] = {"queue": q.queue, "task": q.task, "tenant": q.tenant}
    filters["reason"] = q.reason
    jobs = await app.list_jobs(q.state, limit=q.limit, offset=q.offset, **filters)
    total = await app.count_jobs(q.state, **filters)
    return json_response(job_page(jobs, total, q.limit, q.offset))


def enqueue_options(body: EnqueueBody) -> dict[str, Any]:
    options = body.model_dump(exclude={"task", "payload"}, exclude_none=True)
    for key in ("delay", "timeout", "ttl", "idempotency_ttl", "debounce"):
        if key in options:
            options[key] = parse_duration(options[key])
    return options


async def enqueue(request: Request) -> Response:
    body = await read_body(request, EnqueueBody)
    app = app_of(request)
    check_task_known(app.tasks, body.task)
    with caller_context(request.headers):
        job = await app.enqueue(body.task, body.payload, **enqueue_options(body))
    # A live idempotency key returns the existing job: nothing was created.
    return json_response(job.to_dict(), status=200 if job.duplicate else 201)


async def get_job(request: Request) -> Response:
    job_id = path_param(request, "job_id")
    job = await app_of(request).get_job(job_id)
    if job is None:
        raise JobNotFound(job_id)
    return json_response(job.to_dict())


async def cancel_job(request: Request) -> Response:
    job = await app_of(request).cancel(path_param(request, "job_id"))
    return json_response(job.to_dict())


async def retry_job(request: Request) -> Response:
    """A failed job: enqueue a fresh copy (like ``conveyor jobs retry``)."""
    job = await app_of(request).dlq.retry(path_param(request, "job_id"))
    return json_response(job.to_dict(), status=200 if job.duplicate else 201)


async def delete_job(request: Request) -> Response:
    job_id = path_param(request, "job_id")
    app = app_of(request)
    job = await app.get_job(job_id)
    if job is None:
        raise JobNotFound(job_id)
    if job.state is JobState.ACTIVE:
        raise InvalidStateError(f"job {job_id} is running: cancel it first")
    backend = await app.connect()
    if not await backend.delete_jobs([job_id]):
        # It started or vanished in between: say which.
        if await app.get_job(job_id) is not None:
            raise InvalidStateError(f"job {job_id} is running: cancel it first")
        raise JobNotFound(job_id)
    return json_response({"deleted": job_id})


ROUTES = [
    route("/api/v1/jobs", list_jobs, "GET", Scope.READ),
    route("/api/v1/jobs", enqueue, "POST", Scope.ENQUEUE),
    route("/api/v1/jobs/{job_id}", get_job, "GET", Scope.READ),
    route("/api/v1/jobs/{job_id}", delete_job, "DELETE", Scope.ADMIN),
    route("/api/v1/jobs/{job_id}/cancel", cancel_job, "POST", Scope.ADMIN),
    route("/api/v1/jobs/{job_id}/retry", retry_job, "POST", Scope.ADMIN),
]

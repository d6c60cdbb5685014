"""The OpenAPI 3.1 document of the service, served at ``/api/v1/openapi.json``.

Written out here, endpoint by endpoint, with request schemas taken from the
pydantic models the endpoints validate with; a test checks that every route
of the app is in the document and every documented operation is a route.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from conveyor import __version__
from conveyor.job import FailureReason, JobState
from conveyor.server.api.models import CronBody, EnqueueBody, PurgeBody
from conveyor.server.auth import Scope
from conveyor.server.responses import json_response
from conveyor.server.routing import route

_REF = "#/components/schemas/{model}"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERRORS = {
    "400": _json(_ref("Error"), "Malformed request (e.g. the body is not JSON)"),
    "401": _json(_ref("Error"), "No token, or an unknown token"),
    "403": _json(_ref("Error"), "The token lacks the scope this operation needs"),
    "413": _json(_ref("Error"), "The body is over max_request_bytes"),
    "422": _json(_ref("Error"), "A value is of the wrong type or out of range"),
    "503": _json(_ref("Error"), "The backend is unavailable"),
}


_NAME = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[^\\x00-\\x1f\\x7f]+$"}


def _errors(*codes: str) -> dict[str, Any]:
    return {code: _ERRORS[code] for code in codes}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def _path(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": _NAME,
        "description": description,
    }


_PAGE = [
    _query(
        "limit", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}, "Page size"
    ),
    _query("offset", {"type": "integer", "minimum": 0, "maximum": 2**31 - 1, "default": 0}, "Skip"),
]
_FILTERS = [
    _query("queue", _NAME, "Only this queue"),
    _query("task", _NAME, "Only this task"),
    _query("tenant", _NAME, "Only this tenant"),
    _query("reason", {"enum": [r.value for r in FailureReason]}, "Only this failure reason"),
]
_JOB_ID = _path("job_id", "The job's id")
_QUEUE = _path("name", "The queue's name")
_SCHEDULE = _path("name", "The schedule's name")
_TASK = _path("task", "The task's name")


def _op(
    summary: str,
    scope: Scope | None,
    responses: dict[str, Any],
    *,
    parameters: list[dict[str, Any]] | None = None,
    body: str | None = None,
    tag: str,
) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "tags": [tag], "responses": responses}
    op["security"] = [] if scope is None else [{"bearer": [scope.value]}]
    if scope is not None:
        op["description"] = f"Needs a token with the `{scope.value}` scope (or `admin`)."
    if parameters:
        op["parameters"] = parameters
    if body:
        op["requestBody"] = {"required": True, **_json(_ref(body), body)}
    return op


def _ok(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"200": _json(schema, description)}


_READ_ERRORS = ("401", "403", "422", "503")
_CHANGE_ERRORS = ("400", "401", "403", "413", "422", "503")
#: With RabbitMQ dispatch only: "up" (latency_ms) or "unavailable" (error).
_BROKER = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": ["up", "unavailable"]},
        "latency_ms": {"type": "number"},
        "error": {"type": "string"},
    },
}
_PROBE = {"type": "object", "properties": {"status": {"type": "string"}, "broker": _BROKER}}
_HEALTH_ERRORS = ("401", "403")


def _paths() -> dict[str, Any]:
    job, page = _ref("Job"), _ref("JobPage")
    not_found = {"404": _json(_ref("Error"), "No such job")}
    return {
        "/health/live": {
            "get": _op("The process runs", None, _ok(_PROBE), tag="health"),
        },
        "/health/startup": {
            "get": _op(
                "The service has started",
                None,
                {**_ok(_PROBE), "503": _json(_PROBE, "Still starting")},
                tag="health",
            ),
        },
        "/health/ready": {
            "get": _op(
                "The backend answers",
                None,
                {**_ok(_PROBE), "503": _json(_PROBE, "The backend is down")},
                tag="health",
            ),
        },
        "/health/backend": {
            "get": _op(
                "Backend latency: healthy under the threshold (100 ms), degraded above",
                Scope.READ,
                {
                    **_ok(_ref("BackendHealth")),
                    "503": _json(_ref("BackendHealth"), "Down"),
                    **_errors(*_HEALTH_ERRORS),
                },
                tag="health",
            ),
        },
        "/health/queues": {
            "get": _op(
                "Per-queue counts and oldest waiting age; worker heartbeats",
                Scope.READ,
                {
                    **_ok(_ref("QueuesHealth")),
                    "503": _json(
                        _ref("QueuesHealth"),
                        "Backend down, a queue over its threshold, or too few workers",
                    ),
                    **_errors(*_HEALTH_ERRORS),
                },
                tag="health",
            ),
        },
        "/health": {
            "get": _op(
                "Aggregate health: backend, workers, queues, dead letters",
                Scope.READ,
                {
                    **_ok(_ref("Health")),
                    "503": _json(_ref("Health"), "Unhealthy"),
                    **_errors(*_HEALTH_ERRORS),
                },
                tag="health",
            ),
        },
        "/metrics": {
            "get": _op(
                "Prometheus metrics (text exposition format)",
                Scope.READ,
                {
                    "200": {
                        "description": "Prometheus text format",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **_errors("401", "403", "503"),
                },
                tag="metrics",
            ),
        },
        "/api/v1/openapi.json": {
            "get": _op("This document", None, _ok({"type": "object"}), tag="meta"),
        },
        "/api/v1/jobs": {
            "get": _op(
                "List jobs, newest first",
                Scope.READ,
                {**_ok(page), **_errors(*_READ_ERRORS)},
                parameters=[
                    _query("state", {"enum": [s.value for s in JobState]}, "Only this state"),
                    *_FILTERS,
                    *_PAGE,
                ],
                tag="jobs",
            ),
            "post": _op(
                "Enqueue a job of a registered task",
                Scope.ENQUEUE,
                {
                    "201": _json(job, "Enqueued"),
                    "200": _json(job, "A live idempotency key: the existing job"),
                    "429": _json(_ref("Error"), "The queue is full (backpressure)"),
                    **_errors(*_CHANGE_ERRORS),
                },
                body="EnqueueBody",
                tag="jobs",
            ),
        },
        "/api/v1/jobs/{job_id}": {
            "get": _op(
                "One job",
                Scope.READ,
                {**_ok(job), **not_found, **_errors(*_READ_ERRORS)},
                parameters=[_JOB_ID],
                tag="jobs",
            ),
            "delete": _op(
                "Delete a job that is not running",
                Scope.ADMIN,
                {
                    **_ok(_ref("Deleted")),
                    **not_found,
                    "409": _json(_ref("Error"), "The job is running"),
                    **_errors(*_CHANGE_ERRORS),
                },
                parameters=[_JOB_ID],
                tag="jobs",
            ),
        },
        "/api/v1/jobs/{job_id}/cancel": {
            "post": _op(
                "Cancel: waiting/delayed at once, active ones are signalled",
                Scope.ADMIN,
                {**_ok(job), **not_found, **_errors(*_CHANGE_ERRORS)},
                parameters=[_JOB_ID],
                tag="jobs",
            ),
        },
        "/api/v1/jobs/{job_id}/retry": {
            "post": _op(
                "Retry a failed job: a fresh copy with new attempts",
                Scope.ADMIN,
                {
                    "201": _json(job, "The new job"),
                    **not_found,
                    "409": _json(_ref("Error"), "The job is not failed"),
                    **_errors(*_CHANGE_ERRORS),
                },
                parameters=[_JOB_ID],
                tag="jobs",
            ),
        },
        "/api/v1/dlq": {
            "get": _op(
                "List dead letters (failed jobs)",
                Scope.READ,
                {**_ok(page), **_errors(*_READ_ERRORS)},
                parameters=[*_FILTERS, *_PAGE],
                tag="dlq",
            ),
        },
        "/api/v1/dlq/purge": {
            "post": _op(
                "Delete the dead letters matching every filter",
                Scope.ADMIN,
                {**_ok(_ref("Purged")), **_errors(*_CHANGE_ERRORS)},
                body="PurgeBody",
                tag="dlq",
            ),
        },
        "/api/v1/dlq/{job_id}": {
            "delete": _op(
                "Delete one dead letter",
                Scope.ADMIN,
                {**_ok(_ref("Deleted")), **not_found, **_errors(*_CHANGE_ERRORS)},
                parameters=[_JOB_ID],
                tag="dlq",
            ),
        },
        "/api/v1/dlq/{job_id}/retry": {
            "post": _op(
                "Retry one dead letter",
                Scope.ADMIN,
                {
                    "201": _json(job, "The new job"),
                    **not_found,
                    "409": _json(_ref("Error"), "The job is not failed"),
                    **_errors(*_CHANGE_ERRORS),
                },
                parameters=[_JOB_ID],
                tag="dlq",
            ),
        },
        "/api/v1/queues": {
            "get": _op(
                "Queues: settings and counts per state",
                Scope.READ,
                {**_ok(_ref("QueueList")), **_errors(*_READ_ERRORS)},
                tag="queues",
            ),
        },
        "/api/v1/queues/{name}/pause": {
            "post": _op(
                "Pause a queue: workers stop claiming from it",
                Scope.ADMIN,
                {**_ok(_ref("Queue")), **_errors(*_CHANGE_ERRORS)},
                parameters=[_QUEUE],
                tag="queues",
            ),
        },
        "/api/v1/queues/{name}/resume": {
            "post": _op(
                "Resume a queue",
                Scope.ADMIN,
                {**_ok(_ref("Queue")), **_errors(*_CHANGE_ERRORS)},
                parameters=[_QUEUE],
                tag="queues",
            ),
        },
        "/api/v1/schedules": {
            "get": _op(
                "List schedules",
                Scope.READ,
                {**_ok(_ref("ScheduleList")), **_errors(*_READ_ERRORS)},
                tag="schedules",
            ),
        },
        "/api/v1/schedules/{name}": {
            "get": _op(
                "One schedule with its next fire times",
                Scope.READ,
                {
                    **_ok(_ref("Schedule")),
                    "404": _json(_ref("Error"), "No such schedule"),
                    **_errors(*_READ_ERRORS),
                },
                parameters=[
                    _SCHEDULE,
                    _query(
                        "next",
                        {"type": "integer", "minimum": 0, "maximum": 100, "default": 5},
                        "How many next fire times",
                    ),
                ],
                tag="schedules",
            ),
        },
        **{
            f"/api/v1/schedules/{{name}}/{action}": {
                "post": _op(
                    summary,
                    Scope.ADMIN,
                    {
                        status: _json(_ref(model), "OK"),
                        "404": _json(_ref("Error"), "No such schedule"),
                        **_errors(*_CHANGE_ERRORS),
                    },
                    parameters=[_SCHEDULE],
                    body="CronBody" if action == "cron" else None,
                    tag="schedules",
                )
            }
            for action, summary, status, model in (
                ("pause", "Pause a schedule (persisted)", "200", "Schedule"),
                ("resume", "Resume a schedule", "200", "Schedule"),
                ("trigger", "Enqueue one run now", "201", "Job"),
                ("cron", "Change the cron or interval (persisted)", "200", "Schedule"),
            )
        },
        "/api/v1/workers": {
            "get": _op(
                "Workers from their heartbeats",
                Scope.READ,
                {**_ok(_ref("WorkerList")), **_errors(*_READ_ERRORS)},
                tag="workers",
            ),
        },
        "/api/v1/circuits": {
            "get": _op(
                "Circuit breakers per task",
                Scope.READ,
                {**_ok(_ref("CircuitList")), **_errors(*_READ_ERRORS)},
                tag="circuits",
            ),
        },
        "/api/v1/circuits/{task}/reset": {
            "post": _op(
                "Close a task's circuit",
                Scope.ADMIN,
                {**_ok(_ref("Circuit")), **_errors(*_CHANGE_ERRORS)},
                parameters=[_TASK],
                tag="circuits",
            ),
        },
    }


def _obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


_NUM = {"type": "number"}
_NUM_OR_NULL = {"type": ["number", "null"]}
_STR = {"type": "string"}
_STR_OR_NULL = {"type": ["string", "null"]}
_INT = {"type": "integer"}


def _schemas() -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for model in (EnqueueBody, PurgeBody, CronBody):
        schema = model.model_json_schema(ref_template=_REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    error = _obj(error=_obj(type=_STR, message=_STR))
    error["required"] = ["error"]
    job = _obj(
        id=_STR,
        task=_STR,
        queue=_STR,
        state={"enum": [s.value for s in JobState]},
        payload={},
        priority=_INT,
        attempts=_INT,
        max_attempts=_INT,
        run_at=_NUM,
        created_at=_NUM,
        failure_reason={"enum": [*(r.value for r in FailureReason), None]},
        tenant=_STR_OR_NULL,
        metadata={},
        result={},
        error={},
        errors={"type": "array"},
        duplicate={"type": "boolean"},
    )
    job["required"] = ["id", "task", "queue", "state"]
    counts = {"type": "object", "additionalProperties": _INT}
    queue = _obj(
        name=_STR,
        paused={"type": "boolean"},
        max_size={"type": ["integer", "null"]},
        ttl=_NUM_OR_NULL,
        counts=counts,
    )
    worker = _obj(
        id=_STR,
        host=_STR,
        pid=_INT,
        queues={"type": "array", "items": _STR},
        concurrency=_INT,
        active=_INT,
        started_at=_NUM,
        last_seen=_NUM,
        alive={"type": "boolean"},
    )
    circuit = _obj(task=_STR, state=_STR, failures=_INT, open_until=_NUM_OR_NULL)
    status = {"enum": ["healthy", "degraded", "unhealthy"]}
    schemas.update(
        {
            "Error": error,
            "Job": job,
            "JobPage": _obj(
                jobs={"type": "array", "items": _ref("Job")},
                total=_INT,
                limit=_INT,
                offset=_INT,
            ),
            "Deleted": _obj(deleted=_STR),
            "Purged": _obj(deleted=_INT),
            "Queue": queue,
            "QueueList": _obj(queues={"type": "array", "items": _ref("Queue")}),
            "Worker": worker,
            "WorkerList": _obj(workers={"type": "array", "items": _ref("Worker")}),
            "Circuit": circuit,
            "CircuitList": _obj(circuits={"type": "array", "items": _ref("Circuit")}),
            "Schedule": {"type": "object", "properties": {"name": _STR}},
            "ScheduleList": _obj(schedules={"type": "array", "items": _ref("Schedule")}),
            "BackendHealth": _obj(
                status=status, latency_ms=_NUM_OR_NULL, error=_STR, broker=_BROKER
            ),
            "QueuesHealth": _obj(
                status=status,
                timestamp=_NUM,
                queues={
                    "type": "object",
                    "additionalProperties": _obj(
                        waiting=_INT, active=_INT, failed=_INT, delayed=_INT, oldest_waiting_s=_NUM
                    ),
                },
                workers={
                    "type": "object",
                    "additionalProperties": _obj(
                        alive={"type": "boolean"}, last_seen=_NUM, pid=_INT, host=_STR
                    ),
                },
                problems={"type": "array", "items": _STR},
            ),
            "Health": _obj(
                status=status,
                checks=_obj(
                    backend=_STR, workers=_STR, queues=_STR, dead_letters=_STR, broker=_STR
                ),
                details={"type": "object"},
            ),
        }
    )
    return schemas


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "conveyor",
            "version": __version__,
            "description": "Health, metrics and the admin API of `conveyor serve`.",
        },
        "paths": _paths(),
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


async def openapi_json(request: Request) -> Response:
    return json_response(document())


ROUTES = [route("/api/v1/openapi.json", openapi_json, "GET", None)]

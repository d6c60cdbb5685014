"""The ``paths`` of the OpenAPI document: every operation of the service,
with its parameters, responses and the scope its token needs.

Written out endpoint by endpoint; the request bodies and response shapes they
point to are in :mod:`conveyor.server.openapi.schemas`.
"""

from __future__ import annotations

from typing import Any

from conveyor.job import FailureReason, JobState
from conveyor.server.auth import Scope
from conveyor.server.openapi.schemas import BROKER, ref


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERRORS = {
    "400": _json(ref("Error"), "Malformed request (e.g. the body is not JSON)"),
    "401": _json(ref("Error"), "No token, or an unknown token"),
    "403": _json(ref("Error"), "The token lacks the scope this operation needs"),
    "413": _json(ref("Error"), "The body is over max_request_bytes"),
    "422": _json(ref("Error"), "A value is of the wrong type or out of range"),
    "503": _json(ref("Error"), "The backend is unavailable"),
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
        op["requestBody"] = {"required": True, **_json(ref(body), body)}
    return op


def _ok(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"200": _json(schema, description)}


_READ_ERRORS = ("401", "403", "422", "503")
_CHANGE_ERRORS = ("400", "401", "403", "413", "422", "503")
_PROBE = {"type": "object", "properties": {"status": {"type": "string"}, "broker": BROKER}}
_HEALTH_ERRORS = ("401", "403")


def path_items() -> dict[str, Any]:
    from conveyor.server.openapi import workflows  # it builds on the helpers above

    job, page = ref("Job"), ref("JobPage")
    not_found = {"404": _json(ref("Error"), "No such job")}
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
                    **_ok(ref("BackendHealth")),
                    "503": _json(ref("BackendHealth"), "Down"),
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
                    **_ok(ref("QueuesHealth")),
                    "503": _json(
                        ref("QueuesHealth"),
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
                    **_ok(ref("Health")),
                    "503": _json(ref("Health"), "Unhealthy"),
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
                    "429": _json(ref("Error"), "The queue is full (backpressure)"),
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
                    **_ok(ref("Deleted")),
                    **not_found,
                    "409": _json(ref("Error"), "The job is running"),
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
                    "409": _json(ref("Error"), "The job is not failed"),
                    **_errors(*_CHANGE_ERRORS),
                },
                parameters=[_JOB_ID],
                tag="jobs",
            ),
        },
        **workflows.paths(),
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
                {**_ok(ref("Purged")), **_errors(*_CHANGE_ERRORS)},
                body="PurgeBody",
                tag="dlq",
            ),
        },
        "/api/v1/dlq/{job_id}": {
            "delete": _op(
                "Delete one dead letter",
                Scope.ADMIN,
                {**_ok(ref("Deleted")), **not_found, **_errors(*_CHANGE_ERRORS)},
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
                    "409": _json(ref("Error"), "The job is not failed"),
                    **_errors(*_CHANGE_ERRORS),
                },
                parameters=[_JOB_ID],
                tag="dlq",
            ),
        },
        "/api/v1/queues": {
            "get": _op(
                "Queues: counts per state, jobs per concurrency key, starts per rate key",
                Scope.READ,
                {**_ok(ref("QueueList")), **_errors(*_READ_ERRORS)},
                tag="queues",
            ),
        },
        "/api/v1/queues/{name}/pause": {
            "post": _op(
                "Pause a queue: workers stop claiming from it",
                Scope.ADMIN,
                {**_ok(ref("Queue")), **_errors(*_CHANGE_ERRORS)},
                parameters=[_QUEUE],
                tag="queues",
            ),
        },
        "/api/v1/queues/{name}/resume": {
            "post": _op(
                "Resume a queue",
                Scope.ADMIN,
                {**_ok(ref("Queue")), **_errors(*_CHANGE_ERRORS)},
                parameters=[_QUEUE],
                tag="queues",
            ),
        },
        "/api/v1/schedules": {
            "get": _op(
                "List schedules",
                Scope.READ,
                {**_ok(ref("ScheduleList")), **_errors(*_READ_ERRORS)},
                tag="schedules",
            ),
        },
        "/api/v1/schedules/{name}": {
            "get": _op(
                "One schedule with its next fire times",
                Scope.READ,
                {
                    **_ok(ref("Schedule")),
                    "404": _json(ref("Error"), "No such schedule"),
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
                        status: _json(ref(model), "OK"),
                        "404": _json(ref("Error"), "No such schedule"),
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
                {**_ok(ref("WorkerList")), **_errors(*_READ_ERRORS)},
                tag="workers",
            ),
        },
        "/api/v1/circuits": {
            "get": _op(
                "Circuit breakers per task",
                Scope.READ,
                {**_ok(ref("CircuitList")), **_errors(*_READ_ERRORS)},
                tag="circuits",
            ),
        },
        "/api/v1/circuits/{task}/reset": {
            "post": _op(
                "Close a task's circuit",
                Scope.ADMIN,
                {**_ok(ref("Circuit")), **_errors(*_CHANGE_ERRORS)},
                parameters=[_TASK],
                tag="circuits",
            ),
        },
    }

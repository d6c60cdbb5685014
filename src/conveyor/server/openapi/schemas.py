"""The ``components.schemas`` of the OpenAPI document: request bodies from the
pydantic models the endpoints validate with, response shapes written out here.
"""

from __future__ import annotations

from typing import Any

from conveyor.job import FailureReason, JobState
from conveyor.server.api.models import CronBody, EnqueueBody, PurgeBody

_REF = "#/components/schemas/{model}"


def ref(name: str) -> dict[str, str]:
    """A reference to the component schema ``name``."""
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


_NUM = {"type": "number"}
_NUM_OR_NULL = {"type": ["number", "null"]}
_STR = {"type": "string"}
_STR_OR_NULL = {"type": ["string", "null"]}
_INT = {"type": "integer"}

#: With RabbitMQ dispatch only: "up" (latency_ms) or "unavailable" (error).
BROKER = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": ["up", "unavailable"]},
        "latency_ms": {"type": "number"},
        "error": {"type": "string"},
    },
}


def component_schemas() -> dict[str, Any]:
    from conveyor.server.openapi import workflows  # it builds on paths.py's helpers

    schemas: dict[str, Any] = {}
    for model in (EnqueueBody, PurgeBody, CronBody):
        schema = model.model_json_schema(ref_template=_REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    schemas.update(workflows.schemas())
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
        concurrency_key=_STR_OR_NULL,
        rate_limit_key=_STR_OR_NULL,
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
        fairness={"enum": ["tenant", None]},
        weights={"type": "object", "additionalProperties": _NUM},
        counts=counts,
        tenants={
            "type": "array",
            "description": "A fair queue's tenants with most waiting jobs (at most 50).",
            "items": _obj(tenant=_STR_OR_NULL, waiting=_INT, active=_INT),
        },
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
                jobs={"type": "array", "items": ref("Job")},
                total=_INT,
                limit=_INT,
                offset=_INT,
            ),
            "Deleted": _obj(deleted=_STR),
            "Purged": _obj(deleted=_INT),
            "Queue": queue,
            "QueueList": _obj(
                queues={"type": "array", "items": ref("Queue")},
                keys={"type": "array", "items": ref("KeyUsage")},
                rates={"type": "array", "items": ref("RateUsage")},
            ),
            "KeyUsage": _obj(
                task=_STR,
                key=_STR_OR_NULL,
                running=_INT,
                waiting={"type": ["integer", "null"]},
                cap={"type": ["integer", "null"]},
            ),
            "RateUsage": _obj(task=_STR, key=_STR_OR_NULL, used=_INT, limit=_INT, period=_NUM),
            "Worker": worker,
            "WorkerList": _obj(workers={"type": "array", "items": ref("Worker")}),
            "Circuit": circuit,
            "CircuitList": _obj(circuits={"type": "array", "items": ref("Circuit")}),
            "Schedule": {"type": "object", "properties": {"name": _STR}},
            "ScheduleList": _obj(schedules={"type": "array", "items": ref("Schedule")}),
            "BackendHealth": _obj(
                status=status, latency_ms=_NUM_OR_NULL, error=_STR, broker=BROKER
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

"""The workflow operations and schemas of the OpenAPI document (paths.py and
schemas.py merge them in)."""

from __future__ import annotations

from typing import Any

from conveyor.server.api.models import WORKFLOW_BODY
from conveyor.server.auth import Scope
from conveyor.server.openapi.paths import (
    _CHANGE_ERRORS,
    _READ_ERRORS,
    _errors,
    _json,
    _ok,
    _op,
    _path,
)
from conveyor.server.openapi.schemas import _REF
from conveyor.server.openapi.schemas import ref as _ref
from conveyor.workflow import WorkflowState

_WORKFLOW_ID = _path("workflow_id", "The workflow's id")


def paths() -> dict[str, Any]:
    workflow = _ref("Workflow")
    not_found = {"404": _json(_ref("Error"), "No such workflow")}
    return {
        "/api/v1/workflows": {
            "post": _op(
                "Start a workflow: chains, groups and chords of steps, stored all at once",
                Scope.ENQUEUE,
                {"201": _json(workflow, "Started"), **_errors(*_CHANGE_ERRORS)},
                body="WorkflowNode",
                tag="workflows",
            ),
        },
        "/api/v1/workflows/{workflow_id}": {
            "get": _op(
                "One workflow with every job of it",
                Scope.READ,
                {**_ok(workflow), **not_found, **_errors(*_READ_ERRORS)},
                parameters=[_WORKFLOW_ID],
                tag="workflows",
            ),
        },
        "/api/v1/workflows/{workflow_id}/cancel": {
            "post": _op(
                "Cancel every job of the workflow that has not finished",
                Scope.ADMIN,
                {**_ok(workflow), **not_found, **_errors(*_CHANGE_ERRORS)},
                parameters=[_WORKFLOW_ID],
                tag="workflows",
            ),
        },
    }


def schemas() -> dict[str, Any]:
    """``WorkflowNode`` (the request body, recursive), its parts, and ``Workflow``."""
    node = WORKFLOW_BODY.json_schema(ref_template=_REF)
    found: dict[str, Any] = node.pop("$defs", {})
    found["WorkflowNode"] = node
    found["Workflow"] = {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "state": {"enum": [s.value for s in WorkflowState]},
            "cancelled": {"type": "integer", "description": "Jobs this cancel cancelled"},
            "jobs": {"type": "array", "items": _ref("Job")},
        },
        "required": ["id", "state", "jobs"],
    }
    return found

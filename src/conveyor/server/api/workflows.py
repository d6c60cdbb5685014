"""``/api/v1/workflows``: start one from JSON (scope ``enqueue``), read one, cancel one.

A workflow as JSON is a node: a step is ``POST /api/v1/jobs``'s body (``task``,
``payload``, enqueue options); ``{"chain": [node, ...]}``, ``{"group": [node,
...]}`` and ``{"chord": {"group": [node, ...], "callback": node}}`` nest.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from conveyor.producer import check_task_known
from conveyor.server.api.jobs import enqueue_options
from conveyor.server.api.models import (
    MAX_WORKFLOW_DEPTH,
    WORKFLOW_BODY,
    ChainBody,
    ChordBody,
    EnqueueBody,
    GroupBody,
    WorkflowNode,
)
from conveyor.server.auth import Scope
from conveyor.server.errors import ApiError
from conveyor.server.responses import json_response
from conveyor.server.routing import app_of, path_param, read_json, route, validate_body
from conveyor.tracing import caller_context
from conveyor.workflow import Node, Step, Workflow, chain, chord, group


def workflow_dict(workflow: Workflow, **extra: Any) -> dict[str, Any]:
    return {
        "id": workflow.id,
        "state": workflow.state.value,
        **extra,
        "jobs": [job.to_dict() for job in workflow.jobs],
    }


def _depth(data: Any) -> int:
    """How deep the chains, groups and chords of a JSON workflow nest (walked
    without recursion: a hostile body cannot exhaust the stack)."""
    deepest, pending = 0, [(data, 1)]
    while pending:
        node, depth = pending.pop()
        if not isinstance(node, dict):
            continue
        deepest = max(deepest, depth)
        if depth > MAX_WORKFLOW_DEPTH:
            break
        parts: list[Any] = []
        for kind in ("chain", "group"):
            if isinstance(node.get(kind), list):
                parts.extend(node[kind])
        inner = node.get("chord")
        if isinstance(inner, dict):
            parts.extend(inner["group"] if isinstance(inner.get("group"), list) else [])
            parts.append(inner.get("callback"))
        pending.extend((part, depth + 1) for part in parts)
    return deepest


def _to_node(body: WorkflowNode, tasks: set[str]) -> Node:
    """The validated JSON as chain/group/chord of steps; collects the task names."""
    if isinstance(body, EnqueueBody):
        tasks.add(body.task)
        return Step(body.task, body.payload, enqueue_options(body))
    if isinstance(body, ChainBody):
        return chain(*(_to_node(part, tasks) for part in body.chain))
    if isinstance(body, GroupBody):
        return group(*(_to_node(part, tasks) for part in body.group))
    assert isinstance(body, ChordBody)
    members = group(*(_to_node(part, tasks) for part in body.chord.group))
    return chord(members, _to_node(body.chord.callback, tasks))


async def start_workflow(request: Request) -> Response:
    data = await read_json(request)
    if _depth(data) > MAX_WORKFLOW_DEPTH:
        raise ApiError(
            422, "invalid_body", f"the workflow nests deeper than {MAX_WORKFLOW_DEPTH} levels"
        )
    body = validate_body(data, WORKFLOW_BODY)
    app = app_of(request)
    tasks: set[str] = set()
    root = _to_node(body, tasks)
    for task in sorted(tasks):  # refused before anything is stored
        check_task_known(app.tasks, task)
    with caller_context(request.headers):
        workflow = await app.start(root)
    return json_response(workflow_dict(workflow), status=201)


async def _load(request: Request) -> Workflow:
    workflow_id = path_param(request, "workflow_id")
    workflow = await app_of(request).get_workflow(workflow_id)
    if workflow is None:
        raise ApiError(404, "not_found", f"no workflow with id {workflow_id!r}")
    return workflow


async def get_workflow(request: Request) -> Response:
    return json_response(workflow_dict(await _load(request)))


async def cancel_workflow(request: Request) -> Response:
    """Cancel every job of it that has not finished; says how many."""
    workflow = await _load(request)
    cancelled = await workflow.cancel()
    return json_response(workflow_dict(workflow, cancelled=cancelled))


ROUTES = [
    route("/api/v1/workflows", start_workflow, "POST", Scope.ENQUEUE),
    route("/api/v1/workflows/{workflow_id}", get_workflow, "GET", Scope.READ),
    route("/api/v1/workflows/{workflow_id}/cancel", cancel_workflow, "POST", Scope.ADMIN),
]

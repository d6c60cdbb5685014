"""The GET pages: each reads its data through ``views`` and renders a template
whose ``live`` block the live-update script refreshes in place."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import Response

from conveyor.durations import parse_duration
from conveyor.server.dashboard import views, workflow_view
from conveyor.server.dashboard.guard import error_page
from conveyor.server.dashboard.render import render
from conveyor.server.dashboard.session import Session
from conveyor.server.routing import app_of, state_of


async def overview(request: Request, session: Session) -> Response:
    data = await views.overview(app_of(request))
    return render(request, "overview.html", {"nav": "overview", "o": data}, session=session)


def job_query(params: Mapping[str, str], *, dead_letters: bool) -> tuple[views.JobQuery, list[str]]:
    """The filters of a list page; a bad value is dropped and named, not a crash."""
    problems: list[str] = []

    def text(name: str) -> str | None:
        value = (params.get(name) or "").strip()
        if len(value) > 255:
            problems.append(f"{name}: longer than 255 characters, ignored")
            return None
        return value or None

    q = views.JobQuery(
        queue=text("queue"), task=text("task"), tenant=text("tenant"), search=text("q")
    )
    state = text("state")
    if state and not dead_letters:
        if state in views.STATES:
            q.state = state
        else:
            problems.append(f"state: {state!r} is not a job state, ignored")
    reason = text("reason")
    if reason:
        if reason in views.REASONS:
            q.reason = reason
        else:
            problems.append(f"reason: {reason!r} is not a failure reason, ignored")
    age = text("age")
    if age and dead_letters:
        try:
            if parse_duration(age) < 0:
                raise ValueError("must not be negative")
            q.age = age
        except ValueError as exc:
            problems.append(f"older than: {age!r} is not a duration ({exc}), ignored")
    offset = text("offset")
    if offset:
        if offset.isdigit() and int(offset) < 2**31:
            q.offset = int(offset)
        else:
            problems.append(f"offset: {offset!r} is not a page offset, ignored")
    return q, problems


async def jobs(request: Request, session: Session) -> Response:
    app = app_of(request)
    q, problems = job_query(request.query_params, dead_letters=False)
    data = await views.job_page(app, q, q.state)
    data.problems = problems
    context = {
        "nav": "jobs",
        "q": q,
        "p": data,
        "states": views.STATES,
        "reasons": views.REASONS,
        "tasks": sorted(app.tasks),
    }
    return render(request, "jobs.html", context, session=session)


async def job(request: Request, session: Session) -> Response:
    job_id: str = request.path_params["job_id"]
    detail = await views.job_detail(app_of(request), job_id)
    if detail is None:
        return error_page(
            request, session, 404, f"No job with id {job_id!r} (it may have been deleted)."
        )
    return render(request, "job.html", {"nav": "jobs", "d": detail}, session=session)


async def workflow(request: Request, session: Session) -> Response:
    workflow_id: str = request.path_params["workflow_id"]
    data = await workflow_view.workflow_page(app_of(request), workflow_id)
    if data is None:
        return error_page(request, session, 404, f"No workflow with id {workflow_id!r}.")
    return render(request, "workflow.html", {"nav": "jobs", "w": data}, session=session)


async def dead_letters(request: Request, session: Session) -> Response:
    app = app_of(request)
    q, problems = job_query(request.query_params, dead_letters=True)
    show_retried = request.query_params.get("retried") == "show"
    data = await views.dead_letter_page(app, q, show_retried)
    data.problems = problems
    context = {
        "nav": "dead_letters",
        "q": q,
        "p": data,
        "reasons": views.REASONS,
        "tasks": sorted(app.tasks),
        "show_retried": show_retried,
    }
    return render(request, "dead_letters.html", context, session=session)


async def queues(request: Request, session: Session) -> Response:
    now, rows = await views.queue_rows(app_of(request))
    context = {"nav": "queues", "now": now, "queues": rows, "states": views.STATES}
    probe = state_of(request).broker
    if probe is not None:  # RabbitMQ dispatch: the broker's depths beside the store's
        context["broker"], context["broker_error"] = await views.broker_depths(probe, rows)
    return render(request, "queues.html", context, session=session)


async def schedules(request: Request, session: Session) -> Response:
    rows = await views.schedule_rows(app_of(request))
    return render(request, "schedules.html", {"nav": "schedules", "rows": rows}, session=session)


async def workers(request: Request, session: Session) -> Response:
    now, rows = await views.worker_rows(app_of(request))
    context = {"nav": "workers", "now": now, "rows": rows}
    return render(request, "workers.html", context, session=session)


async def circuits(request: Request, session: Session) -> Response:
    now, rows = await views.circuit_rows(app_of(request))
    context = {"nav": "circuits", "now": now, "rows": rows}
    return render(request, "circuits.html", context, session=session)

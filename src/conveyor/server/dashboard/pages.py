"""The GET pages: each reads its data through ``views`` and renders a template
whose ``live`` block the live-update script refreshes in place: pushed by the
stream (live.py) for the pages of ``LIVE_PAGES``, polled for the others."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from conveyor.durations import parse_duration
from conveyor.flow import KEYS_SHOWN, RATE_KEYS_SHOWN, TENANTS_SHOWN
from conveyor.server.dashboard import views, workflow_view
from conveyor.server.dashboard.guard import PageHandler, error_page
from conveyor.server.dashboard.render import href, local, render
from conveyor.server.dashboard.session import Session
from conveyor.server.routing import app_of, state_of

if TYPE_CHECKING:
    from conveyor.server.state import ServerState

Params = Mapping[str, str]
Context = dict[str, Any]
Loader = Callable[["ServerState", Params], Awaitable[Context]]


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


async def _overview(state: ServerState, params: Params) -> Context:
    return {"nav": "overview", "o": await views.overview(state.app)}


async def _jobs(state: ServerState, params: Params) -> Context:
    app = state.app
    q, problems = job_query(params, dead_letters=False)
    data = await views.job_page(app, q, q.state)
    data.problems = problems
    return {
        "nav": "jobs",
        "q": q,
        "p": data,
        "states": views.STATES,
        "reasons": views.REASONS,
        "tasks": sorted(app.tasks),
    }


async def _dead_letters(state: ServerState, params: Params) -> Context:
    app = state.app
    q, problems = job_query(params, dead_letters=True)
    show_retried = params.get("retried") == "show"
    data = await views.dead_letter_page(app, q, show_retried)
    data.problems = problems
    return {
        "nav": "dead_letters",
        "q": q,
        "p": data,
        "reasons": views.REASONS,
        "tasks": sorted(app.tasks),
        "show_retried": show_retried,
    }


async def _queues(state: ServerState, params: Params) -> Context:
    now, rows = await views.queue_rows(state.app)
    context: Context = {"nav": "queues", "now": now, "queues": rows, "states": views.STATES}
    context["keys"] = await state.app.key_usage()
    context["keys_shown"] = KEYS_SHOWN
    context["rates"] = await state.app.rate_usage()
    context["rates_shown"] = RATE_KEYS_SHOWN
    context["tenants"] = await state.app.tenant_usage()
    context["tenants_shown"] = TENANTS_SHOWN
    if state.broker is not None:  # RabbitMQ dispatch: the broker's depths beside the store's
        context["broker"], context["broker_error"] = await views.broker_depths(state.broker, rows)
    return context


async def _schedules(state: ServerState, params: Params) -> Context:
    return {"nav": "schedules", "rows": await views.schedule_rows(state.app)}


async def _workers(state: ServerState, params: Params) -> Context:
    now, rows = await views.worker_rows(state.app)
    return {"nav": "workers", "now": now, "rows": rows}


async def _circuits(state: ServerState, params: Params) -> Context:
    now, rows = await views.circuit_rows(state.app)
    return {"nav": "circuits", "now": now, "rows": rows}


@dataclass(frozen=True, slots=True)
class LivePage:
    """A page whose ``live`` block the stream (live.py) can push: its data
    depends only on the store and the query string, never on who looks."""

    template: str
    load: Loader


#: By local path. The job and workflow pages are not here: they keep the poll.
LIVE_PAGES: dict[str, LivePage] = {
    "/": LivePage("overview.html", _overview),
    "/jobs": LivePage("jobs.html", _jobs),
    "/dead-letters": LivePage("dead_letters.html", _dead_letters),
    "/queues": LivePage("queues.html", _queues),
    "/schedules": LivePage("schedules.html", _schedules),
    "/workers": LivePage("workers.html", _workers),
    "/circuits": LivePage("circuits.html", _circuits),
}


def _live_page(path: str) -> PageHandler:
    live = LIVE_PAGES[path]

    async def handler(request: Request, session: Session) -> Response:
        context = await live.load(state_of(request), request.query_params)
        stream = href(request, "/live", {"page": local(path, dict(request.query_params))})
        return render(request, live.template, {**context, "stream": stream}, session=session)

    handler.__name__ = live.load.__name__.lstrip("_")
    return handler


overview = _live_page("/")
jobs = _live_page("/jobs")
dead_letters = _live_page("/dead-letters")
queues = _live_page("/queues")
schedules = _live_page("/schedules")
workers = _live_page("/workers")
circuits = _live_page("/circuits")


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

"""The dashboard's routes, added to ``conveyor serve`` by ``server.app.all_routes``."""

from __future__ import annotations

from starlette.routing import Route

from conveyor.server.dashboard import actions, live, pages, signin, static
from conveyor.server.dashboard.guard import action, page

ROUTES: list[Route] = [
    page("/", pages.overview),
    page("/jobs", pages.jobs),
    page("/jobs/{job_id}", pages.job),
    page("/workflows/{workflow_id}", pages.workflow),
    page("/dead-letters", pages.dead_letters),
    page("/queues", pages.queues),
    page("/schedules", pages.schedules),
    page("/workers", pages.workers),
    page("/circuits", pages.circuits),
    action("/jobs/actions", actions.job_action),
    action("/workflows/cancel", actions.cancel_workflow),
    action("/dead-letters/purge", actions.purge),
    action("/queues/pause", actions.pause_queue),
    action("/queues/resume", actions.resume_queue),
    action("/schedules/actions", actions.schedule_action),
    action("/circuits/reset", actions.reset_circuit),
    action("/sign-out", signin.sign_out, scope=None),
    Route("/live", live.stream, methods=["GET"], name="dashboard_live"),
    Route("/sign-in", signin.sign_in_form, methods=["GET"], name="dashboard_sign_in_form"),
    Route("/sign-in", signin.sign_in, methods=["POST"], name="dashboard_sign_in"),
    Route(static.PREFIX + "{name}", static.serve_asset, methods=["GET"], name="dashboard_static"),
]

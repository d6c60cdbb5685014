"""The admin REST API under ``/api/v1``: one module per resource."""

from __future__ import annotations

from starlette.routing import Route

from conveyor.server.api import circuits, dlq, jobs, queues, schedules, workers, workflows

ROUTES: list[Route] = [
    *jobs.ROUTES,
    *workflows.ROUTES,
    *dlq.ROUTES,
    *queues.ROUTES,
    *schedules.ROUTES,
    *workers.ROUTES,
    *circuits.ROUTES,
]

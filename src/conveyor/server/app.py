"""``create_app``: the Starlette application ``conveyor serve`` runs on uvicorn.

Also usable on its own, e.g. mounted in another ASGI app or served by any ASGI
server: ``create_app(my_conveyor_app)``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from conveyor.app import Conveyor
from conveyor.errors import BackendError
from conveyor.server import api, dashboard, health, metrics, openapi
from conveyor.server.auth import TokenAuth
from conveyor.server.dashboard.live import LiveHub
from conveyor.server.dashboard.session import SessionStore
from conveyor.server.errors import ErrorBoundary, error_response, handle_exception
from conveyor.server.limits import BodySizeLimit
from conveyor.server.sitecheck import SiteCheck
from conveyor.server.state import ServerState
from conveyor.server.throttle import FailureThrottle
from conveyor.settings import Settings

logger = logging.getLogger("conveyor.server")


def all_routes() -> list[Route]:
    return [*health.ROUTES, *metrics.ROUTES, *api.ROUTES, *openapi.ROUTES]


async def _not_found(request: Request, exc: Exception) -> Response:
    return error_response(404, "not_found", f"no endpoint at {request.url.path}")


async def _wrong_method(request: Request, exc: Exception) -> Response:
    return error_response(405, "method_not_allowed", f"{request.method} is not allowed here")


def create_app(conveyor_app: Conveyor, settings: Settings | None = None) -> Starlette:
    """The HTTP service for ``conveyor_app``; ``settings`` default to the app's."""
    settings = settings or conveyor_app.settings
    sessions = SessionStore(settings.session_idle_timeout, settings.session_max_age)
    throttle = FailureThrottle(settings.auth_free_failures, settings.auth_lockout)
    auth = TokenAuth(settings.api_tokens, throttle)
    state = ServerState(conveyor_app, settings, auth, sessions)
    # Streams hold their connection: half of the server's connections at most,
    # so that pages and the API always have room (past it, pages poll).
    state.live = LiveHub(state, max_streams=max(1, settings.max_connections // 2))
    if settings.dispatch:
        from conveyor.dispatch.probe import BrokerProbe

        state.broker = BrokerProbe(settings.dispatch)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            await conveyor_app.connect()
        except (BackendError, OSError) as exc:
            # Serve anyway: /health/ready says 503 until the backend answers.
            logger.warning("backend not reachable at startup: %s", exc)
        state.started = True
        try:
            yield
        finally:
            state.started = False
            await state.live.close()
            if state.broker is not None:
                await state.broker.close()
            await conveyor_app.close()

    routes: list[BaseRoute] = [*all_routes(), *dashboard.ROUTES]  # the web UI: not in OpenAPI
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(ErrorBoundary),  # outermost: no exception reaches the server
            Middleware(SiteCheck, loopback_only=not state.auth.enabled),
            Middleware(
                BodySizeLimit,
                max_bytes=settings.max_request_bytes,
                read_timeout=settings.request_read_timeout,
            ),
        ],
        exception_handlers={
            404: _not_found,
            405: _wrong_method,
            Exception: handle_exception,
        },
        lifespan=lifespan,
    )
    app.state.conveyor = state
    return app

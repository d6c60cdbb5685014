"""Every dashboard endpoint goes through one of two wrappers: ``page`` (GET:
a signed-in session with ``read``, else the sign-in form) and ``action`` (POST:
a session, its CSRF token, then the scope; refused otherwise, whatever the page
offered). Errors become pages or a flash message, never a traceback."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from conveyor.errors import BackendError, ConveyorError
from conveyor.server.auth import Scope
from conveyor.server.dashboard.csrf import FIELD, csrf_valid
from conveyor.server.dashboard.forms import Form, local_path, read_form
from conveyor.server.dashboard.render import LIVE_HEADER, redirect, render
from conveyor.server.dashboard.session import (
    Session,
    new_session_id,
    read_session,
    store_session,
)
from conveyor.server.errors import ApiError
from conveyor.server.routing import state_of

logger = logging.getLogger("conveyor.server.dashboard")

PageHandler = Callable[[Request, Session], Awaitable[Response]]
ActionHandler = Callable[[Request, Session, Form], Awaitable[Response]]


def error_page(request: Request, session: Session | None, status: int, message: str) -> Response:
    return render(
        request,
        "error.html",
        {"status": status, "message": message},
        session=session,
        status=status,
    )


def current_session(request: Request) -> tuple[Session | None, bool]:
    """The request's session, and whether it is new (its cookie must be set).
    With no API token configured everyone is admin, in a session made on first visit."""
    state = state_of(request)
    session = read_session(request, state.auth, state.sessions)
    if not state.auth.enabled and session is None:
        return Session(new_session_id(), "", frozenset(Scope)), True
    return session, False


def _where(request: Request) -> str:
    path = request.url.path
    root: str = request.scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :] or "/"
    return path + (f"?{request.url.query}" if request.url.query else "")


def page(path: str, handler: PageHandler) -> Route:
    async def endpoint(request: Request) -> Response:
        session, fresh = current_session(request)
        if session is None or not session.can_read:
            if request.headers.get(LIVE_HEADER) == "1":
                return Response("signed out", status_code=401, media_type="text/plain")
            return redirect(request, "/sign-in?" + urlencode({"next": _where(request)}))
        try:
            response = await handler(request, session)
        except BackendError as exc:
            logger.warning("backend error while rendering %s: %s", request.url.path, exc)
            response = error_page(request, session, 503, f"The backend did not answer: {exc}")
        except (ConveyorError, ValueError) as exc:
            response = error_page(request, session, 422, str(exc))
        except Exception:
            logger.exception("internal error while rendering %s", request.url.path)
            response = error_page(request, session, 500, "Internal error: see the server log.")
        if fresh:
            store_session(request, response, session)
        return response

    endpoint.__name__ = f"dashboard_{handler.__name__}"
    return Route(path, endpoint, methods=["GET"], name=endpoint.__name__)


def action(path: str, handler: ActionHandler, scope: Scope | None = Scope.ADMIN) -> Route:
    """A state change. ``scope=None``: any signed-in session (sign-out)."""

    async def endpoint(request: Request) -> Response:
        session, _ = current_session(request)
        auth_enabled = state_of(request).auth.enabled
        if session is None or (auth_enabled and not session.token):
            return error_page(request, None, 401, "You are not signed in.")
        try:
            form = await read_form(request)
        except ApiError as exc:
            return error_page(request, session, exc.status, exc.message)
        if not csrf_valid(session.csrf, form.get(FIELD)):
            return error_page(
                request,
                session,
                403,
                "This form's security token is missing or out of date: reload the page and "
                "try again.",
            )
        if scope is not None and scope not in session.scopes:
            return error_page(
                request,
                session,
                403,
                f"Your token lacks the {scope.value!r} scope: it can't change anything.",
            )
        back = local_path(form.get("next"), "/")
        try:
            return await handler(request, session, form)
        except BackendError as exc:
            logger.warning("backend error during %s: %s", request.url.path, exc)
            return redirect(request, back, f"The backend did not answer: {exc}", error=True)
        except (ConveyorError, ValueError) as exc:
            return redirect(request, back, str(exc), error=True)
        except Exception:
            logger.exception("internal error during %s", request.url.path)
            return error_page(request, session, 500, "Internal error: see the server log.")

    endpoint.__name__ = f"dashboard_{handler.__name__}"
    return Route(path, endpoint, methods=["POST"], name=endpoint.__name__)

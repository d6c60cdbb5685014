"""Sign in (paste an API token) and sign out."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response

from conveyor.server.auth import Scope
from conveyor.server.dashboard.csrf import FIELD, csrf_valid
from conveyor.server.dashboard.forms import Form, local_path, read_form
from conveyor.server.dashboard.guard import error_page
from conveyor.server.dashboard.render import redirect, render
from conveyor.server.dashboard.session import (
    Session,
    clear_session,
    new_session_id,
    read_session,
    scopes_for,
    store_session,
)
from conveyor.server.errors import ApiError
from conveyor.server.routing import state_of
from conveyor.server.throttle import client_of, retry_after

logger = logging.getLogger("conveyor.server.dashboard")

#: The longest token the form accepts (configured tokens are far shorter).
MAX_TOKEN = 4096


def _form(
    request: Request, session: Session, next_path: str, error: str | None, status: int
) -> Response:
    context = {"nav": "sign_in", "next": next_path, "error": error, "pre": session}
    response = render(request, "sign_in.html", context, session=None, status=status)
    store_session(request, response, session)
    return response


async def sign_in_form(request: Request) -> Response:
    state = state_of(request)
    next_path = local_path(request.query_params.get("next"), "/")
    if not state.auth.enabled:
        return redirect(request, next_path)
    session = read_session(request, state.auth, state.sessions)
    if session is not None and session.can_read:
        return redirect(request, next_path)
    # A session id before sign-in, so the form carries a CSRF token as well.
    pre = session or Session(new_session_id(), "", frozenset())
    return _form(request, pre, next_path, None, 200)


async def sign_in(request: Request) -> Response:
    state = state_of(request)
    auth = state.auth
    if not auth.enabled:
        return redirect(request, "/")
    pre = read_session(request, auth, state.sessions)
    try:
        form: Form = await read_form(request)
    except ApiError as exc:
        return error_page(request, None, exc.status, exc.message)
    next_path = local_path(form.get("next"), "/")
    if pre is None or not csrf_valid(pre.csrf, form.get(FIELD)):
        fresh = Session(new_session_id(), "", frozenset())
        message = "The sign-in form expired (or cookies are off): please try again."
        return _form(request, fresh, next_path, message, 403)
    client = client_of(request)
    wait = auth.throttle.wait_for(client)
    if wait > 0:
        message = f"Too many wrong tokens: try again in {retry_after(wait)} s."
        response = _form(request, pre, next_path, message, 429)
        response.headers["Retry-After"] = retry_after(wait)
        return response
    token = (form.get("token") or "")[: MAX_TOKEN + 1]
    scopes = scopes_for(auth, token) if 0 < len(token) <= MAX_TOKEN else None
    if scopes is None:
        auth.throttle.failed(client)
        # Never the token itself: a mistyped secret is still a secret.
        logger.warning("dashboard sign-in refused: unknown token (from %s)", client)
        return _form(request, pre, next_path, "Unknown token.", 401)
    if Scope.READ not in scopes:
        message = "This token lacks the 'read' scope, so it can't view the dashboard."
        return _form(request, pre, next_path, message, 403)
    # A new session id at sign-in: an id planted before it is worth nothing after.
    session = Session(state.sessions.open(token), token, scopes)
    response = redirect(request, next_path)
    store_session(request, response, session)
    return response


async def sign_out(request: Request, session: Session, form: Form) -> Response:
    state = state_of(request)
    state.sessions.revoke(session.id)
    response = redirect(request, "/sign-in" if state.auth.enabled else "/", "Signed out.")
    clear_session(request, response)
    return response

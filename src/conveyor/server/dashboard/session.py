"""The dashboard session: the API token a user pasted into the sign-in form,
kept in an HttpOnly, SameSite=Strict cookie (Secure over https), next to a
random session id that keys the CSRF token.

Nothing is stored server-side: every request checks the cookie's token against
``settings.api_tokens`` with the API's own :class:`TokenAuth`, so removing a
token from the configuration signs its sessions out at the next request, and a
restart of ``conveyor serve`` signs nobody out. Before sign-in the cookie holds
only a session id, so the sign-in form itself carries a CSRF token too.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from conveyor.server.auth import Scope, TokenAuth
from conveyor.server.dashboard.csrf import csrf_token

COOKIE = "conveyor_session"


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    token: str
    """The API token; empty before sign-in (and always when no token is configured)."""
    scopes: frozenset[Scope]

    @property
    def csrf(self) -> str:
        return csrf_token(self.id, self.token)

    @property
    def can_read(self) -> bool:
        return Scope.READ in self.scopes

    @property
    def can_act(self) -> bool:
        """Changes (retry, cancel, pause, purge, ...) need the ``admin`` scope."""
        return Scope.ADMIN in self.scopes


def scopes_for(auth: TokenAuth, token: str) -> frozenset[Scope] | None:
    """The scopes ``token`` grants (all of them when no token is configured);
    ``None`` for an unknown token."""
    if auth.enabled and (not token or not token.isprintable()):
        return None
    return auth.scopes_of(token)


def new_session_id() -> str:
    return secrets.token_urlsafe(24)


def _encode(session_id: str, token: str) -> str:
    # Unpadded base64: the value needs no quoting in a cookie.
    encoded = base64.urlsafe_b64encode(token.encode()).rstrip(b"=").decode()
    return f"{session_id}.{encoded}"


def _decode(value: str) -> tuple[str, str] | None:
    session_id, dot, encoded = value.partition(".")
    if not dot or len(session_id) < 16:
        return None
    try:
        token = base64.urlsafe_b64decode(encoded.encode() + b"=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return session_id, token


def read_session(request: Request, auth: TokenAuth) -> Session | None:
    """The request's session, or ``None`` without a (well-formed) cookie. A
    cookie whose token is unknown now reads as signed out (same session id)."""
    raw = request.cookies.get(COOKIE)
    decoded = _decode(raw) if raw else None
    if decoded is None:
        return None
    session_id, token = decoded
    scopes = scopes_for(auth, token) if token or not auth.enabled else None
    if scopes is None:
        return Session(session_id, "", frozenset())
    return Session(session_id, token if auth.enabled else "", scopes)


def cookie_path(request: Request) -> str:
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/") + "/"


def store_session(request: Request, response: Response, session: Session) -> None:
    response.set_cookie(
        COOKIE,
        _encode(session.id, session.token),
        path=cookie_path(request),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_session(request: Request, response: Response) -> None:
    response.delete_cookie(
        COOKIE,
        path=cookie_path(request),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )

"""The dashboard session: a random session id in an HttpOnly, SameSite=Strict
cookie (Secure over https); the API token the user signed in with stays on the
server, in a :class:`SessionStore` keyed by that id.

So a stolen cookie is not an API token (it works on no ``/api/v1`` endpoint),
signing out revokes it at once, and it expires: after
``session_idle_timeout`` without a request and ``session_max_age`` after sign-in.
Every request still checks the stored token against ``settings.api_tokens``
with the API's own :class:`TokenAuth`, so removing a token from the
configuration signs its sessions out at the next request. The store lives in
the ``conveyor serve`` process: a restart signs everybody out. Before sign-in
the cookie holds a session id the store does not know, which keys the CSRF
token of the sign-in form.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from conveyor.server.auth import Scope, TokenAuth
from conveyor.server.dashboard.csrf import csrf_token

COOKIE = "conveyor_session"
#: Signed-in sessions kept at most; the least recently used go first.
MAX_SESSIONS = 10_000


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


@dataclass(slots=True)
class _Entry:
    token: str
    started: float
    seen: float


class SessionStore:
    """Signed-in sessions of this process: id -> API token, with expiry."""

    def __init__(self, idle_timeout: float, max_age: float) -> None:
        self.idle_timeout = idle_timeout
        self.max_age = max_age
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def open(self, token: str) -> str:
        """A new session id for ``token``."""
        session_id = new_session_id()
        now = time.monotonic()
        self._entries[session_id] = _Entry(token, now, now)
        while len(self._entries) > MAX_SESSIONS:
            self._entries.popitem(last=False)
        return session_id

    def token_of(self, session_id: str) -> str | None:
        """The token of a live session (and the session is used now); ``None``
        for an unknown, revoked or expired id."""
        entry = self._entries.get(session_id)
        if entry is None:
            return None
        now = time.monotonic()
        if now - entry.seen > self.idle_timeout or now - entry.started > self.max_age:
            del self._entries[session_id]
            return None
        entry.seen = now
        self._entries.move_to_end(session_id)
        return entry.token

    def revoke(self, session_id: str) -> None:
        self._entries.pop(session_id, None)


def scopes_for(auth: TokenAuth, token: str) -> frozenset[Scope] | None:
    """The scopes ``token`` grants (all of them when no token is configured);
    ``None`` for an unknown token."""
    if auth.enabled and (not token or not token.isprintable()):
        return None
    return auth.scopes_of(token)


def new_session_id() -> str:
    return secrets.token_urlsafe(32)


def _valid_id(value: str) -> bool:
    return 16 <= len(value) <= 128 and all(c.isalnum() or c in "-_" for c in value)


def read_session(request: Request, auth: TokenAuth, store: SessionStore) -> Session | None:
    """The request's session, or ``None`` without a (well-formed) cookie. A
    session the store does not know, or whose token is unknown now, reads as
    signed out (same session id)."""
    session_id = request.cookies.get(COOKIE, "")
    if not _valid_id(session_id):
        return None
    if not auth.enabled:
        return Session(session_id, "", frozenset(Scope))
    token = store.token_of(session_id)
    scopes = scopes_for(auth, token) if token else None
    if token is None or scopes is None:
        return Session(session_id, "", frozenset())
    return Session(session_id, token, scopes)


def cookie_path(request: Request) -> str:
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/") + "/"


def store_session(request: Request, response: Response, session: Session) -> None:
    response.set_cookie(
        COOKIE,
        session.id,
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

"""Bearer tokens from ``settings.api_tokens`` (``{token: [scopes]}``).

Scopes: ``read`` (every GET), ``enqueue`` (``POST /api/v1/jobs``), ``admin``
(every other change). ``admin`` includes the other two. With no token
configured the service is open, and ``conveyor serve`` refuses to bind
anything but a loopback address. Tokens are compared in constant time, and
every configured token is compared, so timing tells nothing about which one
nearly matched.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Mapping, Sequence

from starlette.requests import Request

from conveyor.server.errors import ApiError


class Scope(enum.StrEnum):
    READ = "read"
    ENQUEUE = "enqueue"
    ADMIN = "admin"


#: Scopes a granted scope includes.
_INCLUDES: dict[str, frozenset[Scope]] = {
    Scope.READ: frozenset({Scope.READ}),
    Scope.ENQUEUE: frozenset({Scope.ENQUEUE}),
    Scope.ADMIN: frozenset(Scope),
}


class TokenAuth:
    def __init__(self, tokens: Mapping[str, Sequence[str]]) -> None:
        self._tokens: list[tuple[bytes, frozenset[Scope]]] = [
            (token.encode(), frozenset().union(*(_INCLUDES[s] for s in scopes)))
            for token, scopes in tokens.items()
        ]

    @property
    def enabled(self) -> bool:
        return bool(self._tokens)

    def scopes_of(self, presented: str) -> frozenset[Scope] | None:
        """The scopes ``presented`` grants (every scope when no token is
        configured); ``None`` for an unknown token."""
        if not self.enabled:
            return frozenset(Scope)
        return self._scopes_of(presented.encode())

    def _scopes_of(self, presented: bytes) -> frozenset[Scope] | None:
        found: frozenset[Scope] | None = None
        for token, scopes in self._tokens:
            if hmac.compare_digest(token, presented):  # no early exit: see module doc
                found = scopes
        return found

    def check(self, request: Request, needed: Scope) -> None:
        """Raise 401 (no or unknown token) or 403 (token without ``needed``)."""
        if not self.enabled:
            return
        header = request.headers.get("authorization", "")
        kind, _, presented = header.partition(" ")
        if kind.lower() != "bearer" or not presented.strip():
            raise ApiError(401, "unauthorized", "an `Authorization: Bearer <token>` is required")
        scopes = self._scopes_of(presented.strip().encode())
        if scopes is None:
            raise ApiError(401, "unauthorized", "unknown token")
        if needed not in scopes:
            raise ApiError(403, "forbidden", f"this token lacks the {needed.value!r} scope")

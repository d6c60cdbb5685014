"""Bearer tokens from ``settings.api_tokens`` (``{token: [scopes]}``).

Scopes: ``read`` (every GET), ``enqueue`` (``POST /api/v1/jobs``), ``admin``
(every other change). ``admin`` includes the other two. With no token
configured the service is open, and ``conveyor serve`` refuses to bind
anything but a loopback address; beyond loopback it also refuses tokens too
short to resist guessing (:func:`weak_tokens`). Tokens are compared in constant
time, and every configured token is compared, so timing tells nothing about
which one nearly matched; repeated wrong tokens from one address are throttled
(``throttle.py``).
"""

from __future__ import annotations

import enum
import hmac
import math
import string
from collections.abc import Mapping, Sequence

from starlette.requests import Request

from conveyor.server.errors import ApiError
from conveyor.server.throttle import FailureThrottle, client_of, retry_after


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


#: The least entropy a token may have when ``conveyor serve`` binds beyond loopback.
MIN_TOKEN_BITS = 128
_CLASSES = (string.ascii_lowercase, string.ascii_uppercase, string.digits)


def token_bits(token: str) -> float:
    """A generous estimate of a token's entropy: its length times the bits of
    the character classes it uses (a random token of those classes has it)."""
    pool = sum(len(chars) for chars in _CLASSES if any(c in chars for c in token))
    if any(not any(c in chars for chars in _CLASSES) for c in token):
        pool += 32  # punctuation and the rest
    if len(set(token)) < 8:
        return 0.0  # "aaaa...": long, but one guess among few
    return len(token) * math.log2(pool) if pool > 1 else 0.0


def weak_tokens(tokens: Mapping[str, Sequence[str]]) -> list[str]:
    """The scopes of each configured token under :data:`MIN_TOKEN_BITS` (never the token)."""
    return [
        "/".join(scopes) or "no scope"
        for token, scopes in tokens.items()
        if token_bits(token) < MIN_TOKEN_BITS
    ]


class TokenAuth:
    def __init__(
        self, tokens: Mapping[str, Sequence[str]], throttle: FailureThrottle | None = None
    ) -> None:
        self._tokens: list[tuple[bytes, frozenset[Scope]]] = [
            (token.encode(), frozenset().union(*(_INCLUDES[s] for s in scopes)))
            for token, scopes in tokens.items()
        ]
        self.throttle = throttle or FailureThrottle(free_failures=5, lockout=1.0)

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
        client = client_of(request)
        wait = self.throttle.wait_for(client)
        if wait > 0:
            raise ApiError(
                429,
                "too_many_failures",
                "too many wrong tokens from this address: try again later",
                {"Retry-After": retry_after(wait)},
            )
        scopes = self._scopes_of(presented.strip().encode())
        if scopes is None:
            self.throttle.failed(client)
            raise ApiError(401, "unauthorized", "unknown token")
        if needed not in scopes:
            raise ApiError(403, "forbidden", f"this token lacks the {needed.value!r} scope")

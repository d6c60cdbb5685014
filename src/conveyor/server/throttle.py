"""Slows down guessing of API tokens: per client address, after
``auth_free_failures`` wrong tokens (bearer or sign-in form alike) every
further attempt from that address is refused with 429 for a lockout that
starts at ``auth_lockout`` and doubles with each further failure, up to
:data:`MAX_LOCKOUT`. A failure is forgotten :data:`FORGET_AFTER` after the last
one. While locked out even a right token is refused: otherwise the answer
would still tell a guess right from wrong.

The address is the one the ASGI server reports: behind a reverse proxy, make
uvicorn trust its forwarded headers, or every client shares the proxy's.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass

from starlette.requests import Request

MAX_LOCKOUT = 300.0
FORGET_AFTER = 3600.0
#: Addresses remembered at most; the least recently failed go first.
MAX_CLIENTS = 10_000


@dataclass(slots=True)
class _Record:
    failures: int
    last: float
    locked_until: float


def client_of(request: Request) -> str:
    return request.client.host if request.client else "unknown"


class FailureThrottle:
    def __init__(self, free_failures: int, lockout: float) -> None:
        self.free_failures = free_failures
        self.lockout = lockout
        self._records: OrderedDict[str, _Record] = OrderedDict()

    def wait_for(self, client: str) -> float:
        """Seconds ``client`` must wait before its next attempt (0: none)."""
        record = self._records.get(client)
        if record is None:
            return 0.0
        now = time.monotonic()
        if now - record.last > FORGET_AFTER:
            del self._records[client]
            return 0.0
        return max(0.0, record.locked_until - now)

    def failed(self, client: str) -> None:
        now = time.monotonic()
        record = self._records.pop(client, None)
        if record is None or now - record.last > FORGET_AFTER:
            record = _Record(0, now, 0.0)
        record.failures += 1
        record.last = now
        beyond = record.failures - self.free_failures
        if beyond >= 0:
            record.locked_until = now + min(MAX_LOCKOUT, self.lockout * 2 ** min(beyond, 30))
        self._records[client] = record
        while len(self._records) > MAX_CLIENTS:
            self._records.popitem(last=False)


def retry_after(seconds: float) -> str:
    """A ``Retry-After`` value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))

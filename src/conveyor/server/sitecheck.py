"""Refuses requests a browser makes on behalf of another site.

A page on another site can make a visitor's browser send "simple" requests
(form posts, ``text/plain`` fetches) to this service, and through DNS
rebinding it can even read the answers. Bearer tokens defeat both, but with no
token configured (loopback only, see ``auth.py``) nothing else would. So, on
every request:

- with no token configured, the ``Host`` header must name a loopback host
  (``localhost``, ``*.localhost``, ``127.0.0.0/8``, ``::1``): a rebound
  ``evil.example`` pointing at 127.0.0.1 is refused (421);
- a change (any method but GET/HEAD/OPTIONS) is refused (403) when the browser
  says it comes from another origin (``Origin``) or site (``Sec-Fetch-Site``).

JSON endpoints further require ``Content-Type: application/json``
(``routing.read_json``), which a cross-site form cannot send.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from conveyor.server.errors import error_response

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: ``Sec-Fetch-Site`` values a change may carry: this origin, or typed by the user.
_OWN_SITE = frozenset({"same-origin", "none"})


def host_name(host_header: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:8000`` -> ``::1``)."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".")


def is_loopback_name(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _origin_netloc(origin: str) -> str | None:
    """``host[:port]`` of an ``Origin`` header; ``None`` for ``null`` or garbage."""
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return parts.netloc.lower()


class SiteCheck:
    def __init__(self, app: ASGIApp, loopback_only: bool) -> None:
        self.app = app
        self.loopback_only = loopback_only

    def _refusal(self, headers: dict[bytes, bytes], method: str) -> tuple[int, str, str] | None:
        host = headers.get(b"host", b"").decode("latin-1")
        if self.loopback_only and not is_loopback_name(host_name(host)):
            return (
                421,
                "misdirected_request",
                "with no API token configured this service answers only to loopback host "
                "names (localhost, 127.0.0.1, [::1])",
            )
        if method in SAFE_METHODS:
            return None
        fetch_site = headers.get(b"sec-fetch-site", b"").decode("latin-1").strip().lower()
        if fetch_site and fetch_site not in _OWN_SITE:
            return 403, "cross_site_request", "a change from another site is refused"
        origin = headers.get(b"origin")
        if origin is not None:
            own = {host.lower()}
            forwarded = headers.get(b"x-forwarded-host")
            if forwarded:
                own.add(forwarded.decode("latin-1").split(",")[0].strip().lower())
            if _origin_netloc(origin.decode("latin-1")) not in own:
                return 403, "cross_site_request", "a change from another origin is refused"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers", ()))
            refusal = self._refusal(headers, scope["method"])
            if refusal is not None:
                await error_response(*refusal)(scope, receive, send)
                return
        await self.app(scope, receive, send)

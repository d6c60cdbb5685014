"""Jinja2 pages (autoescaped: every value from a job is text, never markup), the
security headers every dashboard answer carries, and one-shot flash messages."""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from conveyor.server.dashboard import static
from conveyor.server.dashboard.session import Session, cookie_path

#: Header the live-update script sends: answer with the page's ``live`` block only.
LIVE_HEADER = "x-conveyor-live"
FLASH_COOKIE = "conveyor_flash"

#: No inline script or style can run, whatever a value manages to smuggle in.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def ago(seconds: float | None) -> str:
    """``"42s"``, ``"5m 3s"``, ``"2h 10m"``, ``"3d 4h"``."""
    if seconds is None or not math.isfinite(seconds):
        return "—"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def _moment(when: float) -> datetime | None:
    """``when`` as a UTC time; ``None`` for a stored value no calendar holds."""
    try:
        return datetime.fromtimestamp(when, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def utc(when: float | None) -> str:
    if when is None:
        return "—"
    moment = _moment(when)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else f"{when:g} (out of range)"


def iso(when: float | None) -> str:
    moment = _moment(when) if when is not None else None
    return moment.isoformat() if moment else ""


def seconds(value: float | None) -> str:
    """A duration as one unit when it divides evenly (``"5m"``, ``"1h"``, ``"2d"``),
    else in seconds (``"90s"``, ``"0.5s"``): a form that ``parse_duration`` reads
    back, so an edit box can show it."""
    if value is None:
        return "—"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if value >= size and math.isclose(value % size, 0, abs_tol=1e-9):
            return f"{value / size:g}{unit}"
    return f"{value:g}s"


def zoned(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S %Z")


_env = Environment(
    loader=PackageLoader("conveyor.server.dashboard", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters.update(ago=ago, utc=utc, iso=iso, seconds=seconds, zoned=zoned)
_env.globals.update(static=static.url_of)


def local(path: str, params: Mapping[str, Any] | None = None) -> str:
    """A path on this dashboard without the mount prefix (a form's ``next``)."""
    query = urlencode({k: v for k, v in (params or {}).items() if v not in (None, "")})
    return path + (f"?{query}" if query else "")


def href(request: Request, path: str, params: Mapping[str, Any] | None = None) -> str:
    """A link on this dashboard (honours a mount prefix), with query parameters."""
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/") + local(path, params)


def _flash_of(request: Request) -> dict[str, str] | None:
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(raw.encode()))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    kind, text = data.get("kind"), data.get("text")
    if kind not in ("ok", "error") or not isinstance(text, str):
        return None
    return {"kind": kind, "text": text}


def redirect(
    request: Request, path: str, flash: str | None = None, error: bool = False
) -> Response:
    """Post/redirect/get: back to ``path`` (a local path), with a message shown once."""
    root: str = request.scope.get("root_path", "")
    response = RedirectResponse(root.rstrip("/") + path, status_code=303, headers=SECURITY_HEADERS)
    if flash:
        value = json.dumps({"kind": "error" if error else "ok", "text": flash[:500]})
        response.set_cookie(
            FLASH_COOKIE,
            base64.urlsafe_b64encode(value.encode()).decode(),
            max_age=60,
            path=cookie_path(request),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
    return response


def _values(
    request: Request, context: Mapping[str, Any], session: Session | None
) -> dict[str, Any]:
    return {
        "request": request,
        "session": session,
        "nav": None,
        "href": lambda path, **params: href(request, path, params),
        "local": lambda path, **params: local(path, params),
        "flash": _flash_of(request),
        **context,
    }


def live_fragment(
    request: Request, template: str, context: Mapping[str, Any], session: Session
) -> str:
    """The page's ``live`` block alone, as the stream pushes it."""
    tmpl = _env.get_template(template)
    return "".join(tmpl.blocks["live"](tmpl.new_context(_values(request, context, session))))


def render(
    request: Request,
    template: str,
    context: Mapping[str, Any],
    *,
    session: Session | None,
    status: int = 200,
) -> Response:
    """The page, or only its ``live`` block when the live-update script asks."""
    tmpl = _env.get_template(template)
    values = _values(request, context, session)
    flash = values["flash"]
    live = request.headers.get(LIVE_HEADER) == "1" and "live" in tmpl.blocks
    render_live = tmpl.blocks["live"] if live else None
    body = "".join(render_live(tmpl.new_context(values))) if render_live else tmpl.render(values)
    response = HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)
    if flash and not live:
        response.delete_cookie(FLASH_COOKIE, path=cookie_path(request))
    return response

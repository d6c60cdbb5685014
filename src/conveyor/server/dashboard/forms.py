"""Form posts (``application/x-www-form-urlencoded``) parsed with the standard
library, and the one rule for where a form may send the browser next."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from starlette.requests import ClientDisconnect, Request

from conveyor.server.errors import ApiError

#: Most values one form may carry (a bulk selection of a full page is 200).
MAX_FIELDS = 1000


class Form:
    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._pairs = pairs

    def get(self, name: str) -> str | None:
        """The first value of ``name``, stripped; ``None`` when absent or blank."""
        for key, value in self._pairs:
            if key == name:
                return value.strip() or None
        return None

    def getlist(self, name: str) -> list[str]:
        """Every non-blank value of ``name``, in order, without repeats."""
        seen: dict[str, None] = {}
        for key, value in self._pairs:
            if key == name and value.strip():
                seen.setdefault(value.strip(), None)
        return list(seen)


async def read_form(request: Request) -> Form:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise ApiError(415, "unsupported_media_type", "a form post is expected")
    try:
        body = await request.body()
    except ClientDisconnect:
        raise ApiError(400, "client_disconnected", "the client went away") from None
    try:
        text = body.decode("utf-8")
        pairs = parse_qsl(
            text, keep_blank_values=True, strict_parsing=False, max_num_fields=MAX_FIELDS
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise ApiError(400, "invalid_form", f"the form could not be read: {exc}") from None
    return Form(pairs)


def local_path(value: str | None, default: str = "/") -> str:
    """``value`` when it is a path on this site, else ``default``: a form's
    ``next`` field must never send the browser to another site."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return default
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or any(ord(c) < 0x20 for c in value):
        return default
    return value

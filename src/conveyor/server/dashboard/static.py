"""The dashboard's own CSS, script and icon, served from the installed package
(no CDN, nothing fetched at run time). URLs carry a content hash, so browsers
may cache them forever and still see a new release at once."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response

PREFIX = "/static/dashboard/"
_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    media_type: str
    version: str


def _load() -> dict[str, Asset]:
    assets = {}
    for entry in resources.files("conveyor.server.dashboard").joinpath("static").iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _TYPES:
            body = entry.read_bytes()
            version = hashlib.sha256(body).hexdigest()[:12]
            assets[entry.name] = Asset(body, _TYPES[suffix], version)
    return assets


ASSETS = _load()


def url_of(name: str) -> str:
    return f"{PREFIX}{name}?v={ASSETS[name].version}"


async def serve_asset(request: Request) -> Response:
    asset = ASSETS.get(request.path_params["name"])
    if asset is None:
        return Response("not found", status_code=404, media_type="text/plain")
    return Response(
        asset.body,
        media_type=asset.media_type,
        headers={
            "Cache-Control": "public, max-age=31536000, immutable",
            "X-Content-Type-Options": "nosniff",
        },
    )

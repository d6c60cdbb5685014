"""The OpenAPI 3.1 document of the service, served at ``/api/v1/openapi.json``.

Written out here, endpoint by endpoint (:mod:`.paths`), with request schemas
taken from the pydantic models the endpoints validate with (:mod:`.schemas`); a
test checks that every route of the app is in the document and every documented
operation is a route.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from conveyor import __version__
from conveyor.server.openapi.paths import path_items
from conveyor.server.openapi.schemas import component_schemas
from conveyor.server.responses import json_response
from conveyor.server.routing import route

__all__ = ["ROUTES", "document", "openapi_json"]


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "conveyor",
            "version": __version__,
            "description": "Health, metrics and the admin API of `conveyor serve`.",
        },
        "paths": path_items(),
        "components": {
            "schemas": component_schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


async def openapi_json(request: Request) -> Response:
    return json_response(document())


ROUTES = [route("/api/v1/openapi.json", openapi_json, "GET", None)]

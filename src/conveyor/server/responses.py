"""JSON responses encoded with orjson."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response


def json_response(
    content: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    body = orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS)
    return Response(body, status_code=status, headers=headers, media_type="application/json")

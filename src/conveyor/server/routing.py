"""Endpoints as plain async functions, wrapped with their scope check and the
error table of errors.py; request parsing helpers shared by every endpoint."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
import pydantic
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from conveyor.server.auth import Scope
from conveyor.server.errors import ApiError, for_exception
from conveyor.server.sitecheck import SAFE_METHODS

if TYPE_CHECKING:
    from conveyor.app import Conveyor
    from conveyor.server.state import ServerState

Endpoint = Callable[[Request], Awaitable[Response]]
M = TypeVar("M", bound=pydantic.BaseModel)
T = TypeVar("T")


def state_of(request: Request) -> ServerState:
    state: ServerState = request.app.state.conveyor
    return state


def app_of(request: Request) -> Conveyor:
    return state_of(request).app


def guarded(scope: Scope | None, endpoint: Endpoint) -> Endpoint:
    """``scope=None``: an open endpoint (the live/startup/ready probes)."""

    async def run(request: Request) -> Response:
        try:
            if scope is not None:
                state_of(request).auth.check(request, scope)
            if request.method not in SAFE_METHODS and "content-type" in request.headers:
                require_json(request)  # even where no body is read
            return await endpoint(request)
        except Exception as exc:
            return for_exception(exc)

    run.__name__ = endpoint.__name__
    return run


def route(path: str, endpoint: Endpoint, method: str, scope: Scope | None) -> Route:
    return Route(path, guarded(scope, endpoint), methods=[method], name=endpoint.__name__)


def _is_json(request: Request) -> bool:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return kind == "application/json" or (
        kind.startswith("application/") and kind.endswith("+json")
    )


def require_json(request: Request) -> None:
    """A body that is not declared JSON is refused (415): a cross-site form or a
    ``text/plain`` fetch cannot declare it without a CORS preflight."""
    if not _is_json(request):
        raise ApiError(
            415, "unsupported_media_type", "the body must be sent as Content-Type: application/json"
        )


async def read_json(request: Request) -> Any:
    require_json(request)
    body = await request.body()
    if not body.strip():
        raise ApiError(400, "invalid_json", "the request needs a JSON body")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None


#: Tags a discriminated union adds to an error's location (workflow nodes):
#: "chain.chain.0.step.task" reads "chain.0.task".
_UNION_TAGS = frozenset({"step", "chain", "group", "chord"})


def _where(loc: tuple[int | str, ...]) -> str:
    kept = [
        str(part)
        for i, part in enumerate(loc)
        if not (
            part in _UNION_TAGS and (part == "step" or (i + 1 < len(loc) and loc[i + 1] == part))
        )
    ]
    return ".".join(kept) or "body"


def _describe(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = _where(err["loc"])
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


async def read_body(request: Request, model: type[M]) -> M:
    data = await read_json(request)
    if not isinstance(data, dict):
        raise ApiError(422, "invalid_body", "the body must be a JSON object")
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ApiError(422, "invalid_body", _describe(exc)) from None


def validate_body(data: Any, adapter: pydantic.TypeAdapter[T]) -> T:
    """Like ``read_body``, for a JSON body already read that is a union of
    models (a workflow)."""
    if not isinstance(data, dict):
        raise ApiError(422, "invalid_body", "the body must be a JSON object")
    try:
        return adapter.validate_python(data)
    except pydantic.ValidationError as exc:
        raise ApiError(422, "invalid_body", _describe(exc)) from None


def read_query(request: Request, model: type[M]) -> M:
    params: dict[str, str] = {}
    for key, value in request.query_params.multi_items():
        if key in params:
            raise ApiError(422, "invalid_query", f"{key}: given more than once")
        params[key] = value
    try:
        return model.model_validate(params)
    except pydantic.ValidationError as exc:
        raise ApiError(422, "invalid_query", _describe(exc)) from None


def path_param(request: Request, name: str) -> str:
    """A path segment; control characters (``%00``…) never reach a backend."""
    value: str = request.path_params[name]
    if len(value) > 255 or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ApiError(422, "invalid_path", f"{name}: not a valid name or id")
    return value

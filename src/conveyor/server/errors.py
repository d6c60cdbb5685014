"""JSON error bodies: every 4xx/5xx answer is ``{"error": {"type", "message"}}``.

Typed conveyor errors map to status codes in one table, so an endpoint simply
lets them propagate. A client's own mistake is never logged as an ERROR: only
an exception that is no client error (a bug) is, once, with its traceback;
:class:`ErrorBoundary` makes sure no exception reaches the ASGI server (which
would log it again, as an ERROR, whatever the answer was).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from conveyor import errors
from conveyor.server.responses import json_response

logger = logging.getLogger("conveyor.server")


class ApiError(Exception):
    """An answer other than success, with its status, a stable type and a message."""

    def __init__(
        self, status: int, type_: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.headers = headers


def error_response(
    status: int, type_: str, message: str, headers: Mapping[str, str] | None = None
) -> Response:
    every = dict(headers or {})
    if status == 401:
        every["WWW-Authenticate"] = "Bearer"
    return json_response(
        {"error": {"type": type_, "message": message}}, status=status, headers=every or None
    )


#: Most specific first: the first class an exception is an instance of wins.
_STATUS: tuple[tuple[type[Exception], int, str], ...] = (
    (errors.QueueFull, 429, "queue_full"),
    (errors.PayloadTooLarge, 413, "payload_too_large"),
    (errors.SerializationError, 422, "serialization_error"),
    (errors.JobNotFound, 404, "not_found"),
    (errors.ScheduleNotFound, 404, "not_found"),
    (errors.InvalidSchedule, 422, "invalid_schedule"),
    (errors.UnknownTask, 422, "unknown_task"),
    (errors.InvalidWorkflow, 422, "invalid_workflow"),
    (errors.InvalidStateError, 409, "invalid_state"),
    (errors.BackendUnavailable, 503, "backend_unavailable"),
    (errors.BackendError, 503, "backend_error"),
    (errors.ConfigurationError, 422, "invalid_value"),
)


def for_exception(exc: Exception) -> Response:
    if isinstance(exc, ClientDisconnect):
        # The client went away mid-request: nobody reads this answer, and it
        # is no fault of the service.
        logger.info("client disconnected before its request body was read")
        return error_response(400, "client_disconnected", "the client went away")
    if isinstance(exc, ApiError):
        return error_response(exc.status, exc.type, exc.message, exc.headers)
    for cls, status, type_ in _STATUS:
        if isinstance(exc, cls):
            if status >= 500:
                logger.warning("backend error while serving a request: %s", exc)
            return error_response(status, type_, str(exc))
    if is_client_error(exc):
        # The core refuses bad input (enqueue options, a workflow, a payload,
        # a number no store holds) with these and a clear message: the
        # client's mistake, not the service's. DEBUG keeps the traceback.
        logger.debug("request refused: %s", exc, exc_info=exc)
        return error_response(422, "invalid_value", str(exc))
    logger.exception("internal error while serving a request")
    return error_response(500, "internal_error", "internal server error")


def is_client_error(exc: BaseException) -> bool:
    """Bad input rather than a fault of the service: ValueError and TypeError
    (with conveyor's errors that are one: InvalidWorkflow, ValidationError,
    SerializationError, ConfigurationError), OverflowError (a number too large
    for a store), a client gone away, an ApiError under 500."""
    if isinstance(exc, ApiError):
        return exc.status < 500
    return isinstance(exc, ValueError | TypeError | OverflowError | ClientDisconnect)


async def handle_exception(request: Request, exc: Exception) -> Response:
    return for_exception(exc)


class ErrorBoundary:
    """The outermost middleware: an exception that got past every endpoint's
    own handling becomes its JSON answer here (:func:`for_exception`) instead
    of reaching the ASGI server. Starlette's error middleware would re-raise
    it after answering, and uvicorn log it as an ERROR with a traceback, even
    for a client's mistake answered 4xx."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked_send)
        except Exception as exc:
            if not started:
                await for_exception(exc)(scope, receive, send)
            elif is_client_error(exc):
                logger.info("request ended by the client mid-answer: %s", exc)
            else:
                raise  # the answer is half sent: the server must drop the connection

"""JSON error bodies: every 4xx/5xx answer is ``{"error": {"type", "message"}}``.

Typed conveyor errors map to status codes in one table, so an endpoint simply
lets them propagate.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

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
    if isinstance(exc, ValueError | TypeError) and not isinstance(exc, errors.ConveyorError):
        # The core validates enqueue options and raises these with a clear message.
        return error_response(422, "invalid_value", str(exc))
    logger.exception("internal error while serving a request")
    return error_response(500, "internal_error", "internal server error")


async def handle_exception(request: Request, exc: Exception) -> Response:
    return for_exception(exc)

"""The request-body size limit (``max_request_bytes``): larger bodies get 413
before the endpoint runs, whether they announce a Content-Length or stream.
A body that trickles in slower than ``request_read_timeout`` per chunk gets
408, so a slow client cannot hold a connection and a task forever."""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from conveyor.server.errors import ApiError, error_response


class BodyTooLarge(ApiError):
    """Raised while an endpoint reads a body that grows past the limit."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(
            413, "body_too_large", f"request body is over the limit of {max_bytes} bytes"
        )


class BodyTooSlow(ApiError):
    def __init__(self, seconds: float) -> None:
        super().__init__(
            408, "request_timeout", f"no part of the request body came for {seconds:g} s"
        )


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, read_timeout: float = 30.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout = read_timeout

    def _refusal(self) -> ASGIApp:
        refusal = BodyTooLarge(self.max_bytes)
        return error_response(refusal.status, refusal.type, refusal.message)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    announced = int(value)
                except ValueError:
                    announced = -1
                if announced > self.max_bytes:
                    await self._refusal()(scope, receive, send)
                    return
        seen = 0
        started = False
        body_done = False

        async def counted_receive() -> Message:
            nonlocal seen, body_done
            if body_done:  # only the disconnect is left: a stream waits for it for long
                return await receive()
            try:
                async with asyncio.timeout(self.read_timeout):
                    message = await receive()
            except TimeoutError:
                raise BodyTooSlow(self.read_timeout) from None
            if message["type"] == "http.request":
                body_done = not message.get("more_body", False)
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except BodyTooLarge:
            if not started:
                await self._refusal()(scope, receive, send)
        except BodyTooSlow as slow:
            if not started:
                await error_response(slow.status, slow.type, slow.message)(scope, receive, send)

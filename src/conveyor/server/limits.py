"""The request-body size limit (``max_request_bytes``): larger bodies get 413
before the endpoint runs, whether they announce a Content-Length or stream."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from conveyor.server.errors import ApiError, error_response


class BodyTooLarge(ApiError):
    """Raised while an endpoint reads a body that grows past the limit."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(
            413, "body_too_large", f"request body is over the limit of {max_bytes} bytes"
        )


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

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

        async def counted_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
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

"""Live updates by server-sent events: ``GET /live?page=/jobs?state=waiting``
streams the ``live`` block of that page whenever what it shows changes.

One :class:`LiveHub` per server process reads each watched page (a *topic*:
path and query) once per ``interval``, however many browsers watch it, and
publishes a new snapshot only when the data differs (or every ``ages_every``
seconds, so that "42s ago" does not go stale). Each stream renders the
snapshot for its own session and sends it when its HTML differs from the last
one sent. A topic's reader task runs while someone watches and stops with the
last watcher. Streams recheck their session every few seconds and end when it
is signed out; beyond ``max_streams`` a stream is refused (503) and the page
falls back to polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from conveyor.server.dashboard.guard import current_session
from conveyor.server.dashboard.pages import LIVE_PAGES, Context, LivePage
from conveyor.server.dashboard.render import SECURITY_HEADERS, live_fragment
from conveyor.server.dashboard.session import Session
from conveyor.server.routing import state_of

if TYPE_CHECKING:
    from conveyor.server.state import ServerState

logger = logging.getLogger("conveyor.server.dashboard")

#: Values that move with the clock alone: a change in them is not news.
CLOCK_FIELDS = frozenset({"now", "oldest_waiting_s"})


def fingerprint(value: Any) -> Any:
    """``value`` as nested tuples, without the clock fields: equal when a page
    would show the same thing apart from its relative times."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (
            type(value).__name__,
            tuple(
                (f.name, fingerprint(getattr(value, f.name)))
                for f in dataclasses.fields(value)
                if f.name not in CLOCK_FIELDS
            ),
        )
    if isinstance(value, dict):
        return tuple(
            (k, fingerprint(v))
            for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
            if k not in CLOCK_FIELDS
        )
    if isinstance(value, list | tuple | set | frozenset):
        items = [fingerprint(v) for v in value]
        return tuple(sorted(items, key=repr) if isinstance(value, set | frozenset) else items)
    return repr(value)


class Topic:
    """One watched page: its latest snapshot and the task that refreshes it."""

    def __init__(self, hub: LiveHub, page: LivePage, params: dict[str, str]) -> None:
        self.hub = hub
        self.page = page
        self.params = params
        self.watchers = 0
        self.version = 0
        self.context: Context | None = None
        self.reads = 0
        """Store reads made (one per interval while watched): what a test counts."""
        self._fingerprint: Any = None
        self._published_at = 0.0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        failing = False
        while True:
            try:
                self.reads += 1
                context = await self.page.load(self.hub.state, self.params)
            except Exception as exc:  # the store is down: keep the last snapshot
                if not failing:
                    logger.warning("live update of %s failed: %s", self.page.template, exc)
                failing = True
            else:
                failing = False
                self._offer(context)
            await asyncio.sleep(self.hub.interval)

    def _offer(self, context: Context) -> None:
        new = fingerprint(context)
        stale = time.monotonic() - self._published_at >= self.hub.ages_every
        if self.context is not None and new == self._fingerprint and not stale:
            return
        self.context, self._fingerprint = context, new
        self._published_at = time.monotonic()
        self.version += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_newer(self, version: int, timeout: float) -> None:
        """Until a snapshot newer than ``version`` is out, or ``timeout`` passed."""
        if self.version > version:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._changed.wait()


class LiveHub:
    """The shared snapshots of one server process."""

    def __init__(
        self,
        state: ServerState,
        *,
        max_streams: int,
        interval: float = 1.0,
        ages_every: float = 10.0,
        heartbeat: float = 15.0,
        session_check: float = 5.0,
    ) -> None:
        self.state = state
        self.max_streams = max_streams
        self.interval = interval
        self.ages_every = ages_every
        self.heartbeat = heartbeat
        self.session_check = session_check
        self.topics: dict[str, Topic] = {}
        self.streams = 0
        self.closing = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    @contextlib.asynccontextmanager
    async def watch(self, key: str, page: LivePage, params: dict[str, str]) -> AsyncIterator[Topic]:
        self._loop = asyncio.get_running_loop()
        topic = self.topics.get(key)
        if topic is None:
            topic = self.topics[key] = Topic(self, page, params)
        topic.watchers += 1
        self.streams += 1
        topic.start()
        try:
            yield topic
        finally:
            self.streams -= 1
            topic.watchers -= 1
            if topic.watchers == 0:
                del self.topics[key]
                await topic.stop()

    async def close(self) -> None:
        """End every stream (the server stops) and every reader task."""
        self._end_streams()
        for topic in list(self.topics.values()):
            await topic.stop()

    def _end_streams(self) -> None:
        self.closing.set()
        for topic in self.topics.values():
            topic._changed.set()  # wakes the waiting streams, which see ``closing``

    def close_soon(self) -> None:
        """From a signal handler: end the streams so that a graceful shutdown
        does not wait on browsers that never hang up."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._end_streams)


def event(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


class EventStream(StreamingResponse):
    """A streaming response that always watches for the client going away
    (whatever ASGI version the server speaks), then cancels the generator."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        streaming = asyncio.ensure_future(self.stream_response(send))
        waiting = asyncio.ensure_future(self.listen_for_disconnect(receive))
        try:
            await asyncio.wait({streaming, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (streaming, waiting):
                task.cancel()
            for task in (streaming, waiting):
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await task


def _page_of(request: Request) -> tuple[str, LivePage, dict[str, str]] | None:
    """The watched page from ``?page=``: a local path of ``LIVE_PAGES``."""
    target = request.query_params.get("page", "")
    if len(target) > 2000:
        return None
    parts = urlsplit(target)
    page = LIVE_PAGES.get(parts.path) if not (parts.scheme or parts.netloc) else None
    if page is None:
        return None
    params = dict(parse_qsl(parts.query))
    key = parts.path + "?" + "&".join(f"{k}={v}" for k, v in sorted(params.items()))
    return key, page, params


def _reader(request: Request) -> Session | None:
    """The request's session if it may still read the dashboard."""
    session, _ = current_session(request)
    return session if session is not None and session.can_read else None


async def stream(request: Request) -> Response:
    session = _reader(request)
    if session is None:
        return Response("signed out", status_code=401, media_type="text/plain")
    found = _page_of(request)
    if found is None:
        return Response("no live updates for this page", status_code=404, media_type="text/plain")
    hub = state_of(request).live
    if hub.streams >= hub.max_streams:
        headers = {"Retry-After": "30"}
        return Response("too many live streams", status_code=503, headers=headers)
    key, page, params = found
    body = _events(hub, key, page, params, request, session)
    headers = {**SECURITY_HEADERS, "X-Accel-Buffering": "no"}
    return EventStream(body, media_type="text/event-stream", headers=headers)


async def _events(
    hub: LiveHub,
    key: str,
    page: LivePage,
    params: dict[str, str],
    request: Request,
    session: Session,
) -> AsyncIterator[str]:
    # The browser reconnects by itself after 5 s when the stream drops; the
    # script adds its own backoff on top, polling meanwhile.
    yield "retry: 5000\n\n"
    async with hub.watch(key, page, params) as topic:
        seen, sent_html = 0, None
        last_write = checked = time.monotonic()
        while not hub.closing.is_set():
            await topic.wait_newer(seen, min(hub.heartbeat, hub.session_check))
            now = time.monotonic()
            if now - checked >= hub.session_check:
                checked = now
                current = _reader(request)
                if current is None:  # signed out, expired or its token removed
                    yield event("signed-out", {})
                    return
                session = current
            if topic.version > seen and topic.context is not None:
                seen = topic.version
                html = live_fragment(request, page.template, topic.context, session)
                if html != sent_html:
                    sent_html, last_write = html, now
                    yield event("snapshot", {"html": html, "version": seen})
                    continue
            if now - last_write >= hub.heartbeat:
                last_write = now
                yield ": keep-alive\n\n"

"""The live-update stream (``GET /live``): server-sent events driven through
the ASGI app itself, so that a test can read events one by one and hang up
like a browser closing its tab."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from starlette.applications import Starlette
from starlette.types import Message

from conveyor.app import Conveyor
from conveyor.server import create_app
from conveyor.server.dashboard.live import LiveHub
from conveyor.server.dashboard.session import COOKIE

from .apps.shop import build
from .conftest import ADMIN, ENQUEUE, TOKENS, sign_in


@dataclass
class Served:
    app: Conveyor
    web: Starlette
    client: httpx.AsyncClient

    @property
    def hub(self) -> LiveHub:
        hub: LiveHub = self.web.state.conveyor.live
        return hub

    async def signed_in_cookie(self) -> str:
        assert (await sign_in(self.client, ADMIN)).status_code == 303
        cookie = self.client.cookies.get(COOKIE)
        assert cookie
        return cookie


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    app = build(f"sqlite:///{tmp_path / 'jobs.db'}", api_tokens=TOKENS, request_read_timeout=0.3)
    web = create_app(app)
    hub: LiveHub = web.state.conveyor.live
    hub.interval, hub.heartbeat, hub.session_check = 0.05, 0.3, 0.1
    lifespan = web.router.lifespan_context(web)
    await lifespan.__aenter__()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=web), base_url="http://localhost")
    try:
        yield Served(app, web, client)
    finally:
        await client.aclose()
        await lifespan.__aexit__(None, None, None)


@dataclass
class Stream:
    """One ``GET /live`` in flight: its status, its events, and a hang-up."""

    web: Starlette
    page: str
    cookie: str
    status: int | None = None
    text: str = ""
    events: asyncio.Queue[tuple[str, str]] = field(default_factory=asyncio.Queue)
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def start(self) -> Stream:
        query = urlencode({"page": self.page}).encode()
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": "/live",
            "raw_path": b"/live",
            "root_path": "",
            "query_string": query,
            "headers": [(b"host", b"localhost"), (b"cookie", f"{COOKIE}={self.cookie}".encode())],
            "client": ("127.0.0.1", 50000),
            "server": ("localhost", 80),
            "state": {},
        }
        sent_body = False

        async def receive() -> Message:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await self.gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.status = message["status"]
                return
            self.text += message.get("body", b"").decode()
            while "\n\n" in self.text:
                block, self.text = self.text.split("\n\n", 1)
                name, data = "message", ""
                for line in block.split("\n"):
                    if line.startswith("event: "):
                        name = line[7:]
                    elif line.startswith("data: "):
                        data = line[6:]
                    elif line.startswith(":"):
                        name = "comment"
                await self.events.put((name, data))

        self.task = asyncio.create_task(self.web(scope, receive, send))
        return self

    async def next(self, name: str, timeout: float = 5.0) -> str:
        """The data of the next event called ``name`` (others are skipped)."""
        async with asyncio.timeout(timeout):
            while True:
                got, data = await self.events.get()
                if got == name:
                    return data

    async def snapshot(self, timeout: float = 5.0) -> str:
        html: str = json.loads(await self.next("snapshot", timeout))["html"]
        return html

    async def hang_up(self) -> None:
        self.gone.set()
        assert self.task is not None
        async with asyncio.timeout(5):
            await self.task


async def test_a_job_enqueued_through_the_api_is_pushed_to_the_jobs_page(served: Served) -> None:
    cookie = await served.signed_in_cookie()
    stream = Stream(served.web, "/jobs?queue=emails", cookie).start()
    first = await stream.snapshot()
    assert stream.status == 200
    assert "No jobs" in first or "<table" in first
    created = await served.client.post(
        "/api/v1/jobs",
        json={"task": "mail.send", "payload": {"to": "live@example.com"}},
        headers={"Authorization": f"Bearer {ENQUEUE}"},
    )
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    assert job_id not in first
    assert job_id in await stream.snapshot()
    await stream.hang_up()


async def test_nothing_new_is_sent_while_nothing_changes_but_heartbeats_are(
    served: Served,
) -> None:
    cookie = await served.signed_in_cookie()
    stream = Stream(served.web, "/jobs", cookie).start()
    await stream.snapshot()
    await stream.next("comment", timeout=2)  # a heartbeat, 0.3 s in
    await asyncio.sleep(0.5)  # ten reads of the store, nothing changed
    names = [stream.events.get_nowait()[0] for _ in range(stream.events.qsize())]
    assert "snapshot" not in names
    # The stream outlived the body-read timeout (0.3 s): waiting for the
    # client's disconnect is not reading a body.
    assert stream.task is not None
    assert not stream.task.done()
    await stream.hang_up()


async def test_the_overview_counts_are_pushed(served: Served) -> None:
    cookie = await served.signed_in_cookie()
    stream = Stream(served.web, "/", cookie).start()
    assert 'data-total="waiting">0<' in await stream.snapshot()
    await served.app.enqueue_many([("report.build", {"pages": 1}, {})] * 2)
    assert 'data-total="waiting">2<' in await stream.snapshot()
    await stream.hang_up()


async def test_one_store_read_per_interval_whatever_the_number_of_streams(
    served: Served,
) -> None:
    cookie = await served.signed_in_cookie()
    streams = [Stream(served.web, "/jobs", cookie).start() for _ in range(5)]
    for stream in streams:
        await stream.snapshot()
    assert served.hub.streams == 5
    [topic] = served.hub.topics.values()  # the same page: one shared snapshot
    before = topic.reads
    await asyncio.sleep(0.5)
    assert 5 <= topic.reads - before <= 12  # 0.5 s / 0.05 s, not five times that
    for stream in streams:
        await stream.hang_up()


async def test_the_stream_ends_when_the_client_goes_away(served: Served) -> None:
    cookie = await served.signed_in_cookie()
    stream = Stream(served.web, "/queues", cookie).start()
    await stream.snapshot()
    [topic] = served.hub.topics.values()
    reader = topic._task
    assert reader is not None
    assert not reader.done()
    await stream.hang_up()  # returns: the response ended
    assert served.hub.streams == 0
    assert served.hub.topics == {}
    assert reader.done()  # the last watcher gone, the page is no longer read


async def test_a_signed_out_session_gets_401_and_an_open_stream_ends(served: Served) -> None:
    anonymous = await served.client.get("/live", params={"page": "/jobs"})
    assert anonymous.status_code == 401
    cookie = await served.signed_in_cookie()
    stream = Stream(served.web, "/jobs", cookie).start()
    await stream.snapshot()
    served.web.state.conveyor.sessions.revoke(cookie)  # as sign-out does
    await stream.next("signed-out", timeout=2)
    assert stream.task is not None
    async with asyncio.timeout(2):
        await stream.task  # the server ended it, not the client
    assert served.hub.topics == {}
    refused = Stream(served.web, "/jobs", cookie).start()
    async with asyncio.timeout(2):
        await refused.task  # type: ignore[misc]
    assert refused.status == 401


async def test_pages_without_a_stream_and_the_stream_limit(served: Served) -> None:
    cookie = await served.signed_in_cookie()
    for page in ("/jobs/some-id", "https://elsewhere.example/jobs", "/nowhere"):
        response = await served.client.get("/live", params={"page": page})
        assert response.status_code == 404, page
    served.hub.max_streams = 1
    first = Stream(served.web, "/", cookie).start()
    await first.snapshot()
    second = await served.client.get("/live", params={"page": "/"})
    assert second.status_code == 503  # the page polls instead
    await first.hang_up()


async def test_closing_the_hub_ends_every_stream(served: Served) -> None:
    cookie = await served.signed_in_cookie()
    stream = Stream(served.web, "/workers", cookie).start()
    await stream.snapshot()
    served.hub.session_check = served.hub.heartbeat = 60.0  # only the close can end it
    served.hub.close_soon()  # what SIGTERM does in conveyor serve
    assert stream.task is not None
    async with asyncio.timeout(1):
        await stream.task
    assert served.hub.topics == {}


async def test_the_pages_name_their_stream(served: Served) -> None:
    await served.signed_in_cookie()
    jobs = await served.client.get("/jobs", params={"queue": "emails"})
    assert 'data-live-stream="/live?page=%2Fjobs%3Fqueue%3Demails"' in jobs.text
    job = await served.client.get("/jobs/nope")
    assert "data-live-stream" not in job.text  # the job page keeps the poll

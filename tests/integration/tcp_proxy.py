"""A small TCP proxy in the test's event loop, for faults between two servers.

:class:`Proxy` listens on a free port of 127.0.0.1 and forwards each accepted
connection to ``127.0.0.1:<target>``. It can

- hold what the server sends for ``delay`` seconds before passing it on (a slow
  link: a replica that lags its primary by that much);
- :meth:`~Proxy.sever` every connection at once, dropping what it still holds
  (the link and the bytes in it die with the host);
- :meth:`~Proxy.retarget` new connections to another server (a virtual address
  that follows the primary after a failover).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

CHUNK = 64 * 1024


class Proxy:
    def __init__(self, target: int, delay: float = 0.0) -> None:
        self.target = target
        self.delay = delay
        self.port = 0
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def retarget(self, target: int) -> None:
        """Connections accepted from now on go to ``target``."""
        self.target = target

    def sever(self) -> int:
        """Abort every open connection now; what the proxy still held is lost.
        Returns how many bytes were dropped."""
        links, self._links = self._links, set()
        return sum(link.abort() for link in links)

    async def close(self) -> None:
        self.sever()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.transport.abort()
            return
        link = _Link(writer, up_writer, self.delay)
        self._links.add(link)
        await link.run(reader, up_reader)
        self._links.discard(link)


class _Link:
    """One proxied connection: client -> server at once, server -> client
    after ``delay``."""

    def __init__(
        self, client: asyncio.StreamWriter, server: asyncio.StreamWriter, delay: float
    ) -> None:
        self.client = client
        self.server = server
        self.delay = delay
        self.held: deque[tuple[float, bytes]] = deque()
        self.arrived = asyncio.Event()
        self.eof = False
        self.tasks: list[asyncio.Task[None]] = []

    async def run(self, client: asyncio.StreamReader, server: asyncio.StreamReader) -> None:
        self.tasks = [
            asyncio.ensure_future(self._pump(client, self.server, 0.0)),
            asyncio.ensure_future(self._pump(server, self.client, self.delay)),
        ]
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
        self.abort()

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, delay: float
    ) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            if not delay:
                while chunk := await source.read(CHUNK):
                    sink.write(chunk)
                    await sink.drain()
                return
            sender = asyncio.ensure_future(self._send_held(sink))
            try:
                while chunk := await source.read(CHUNK):
                    self.held.append((loop.time() + delay, chunk))
                    self.arrived.set()
                self.eof = True  # the server closed: deliver what is held, as a link would
                self.arrived.set()
                await sender
            finally:
                sender.cancel()

    async def _send_held(self, sink: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        while self.held or not self.eof:
            if not self.held:
                self.arrived.clear()
                await self.arrived.wait()
                continue
            due, chunk = self.held[0]
            if (wait := due - loop.time()) > 0:
                await asyncio.sleep(wait)
            self.held.popleft()
            sink.write(chunk)
            await sink.drain()

    def abort(self) -> int:
        dropped = sum(len(chunk) for _, chunk in self.held)
        self.held.clear()
        for task in self.tasks:
            task.cancel()
        for writer in (self.client, self.server):
            writer.transport.abort()
        return dropped

"""A small TCP proxy in the test's event loop, for faults between two servers.

:class:`Proxy` listens on a free port of 127.0.0.1 and forwards each accepted
connection to ``127.0.0.1:<target>``. It can

- hold what the server sends for ``delay`` seconds before passing it on (a slow
  link: a replica that lags its primary by that much), and what the client
  sends for ``upstream_delay``; ``jitter`` adds up to that many seconds more to
  each chunk, at random, without ever reordering the stream (a chunk is never
  passed on before the one ahead of it);
- listen on another address than 127.0.0.1 (``host``: the host's end of a
  veth link, for a client in a network namespace);
- :meth:`~Proxy.sever` every connection at once, dropping what it still holds
  (the link and the bytes in it die with the host);
- :meth:`~Proxy.retarget` new connections to another server (a virtual address
  that follows the primary after a failover).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque

CHUNK = 64 * 1024


class Proxy:
    def __init__(
        self,
        target: int,
        delay: float = 0.0,
        *,
        upstream_delay: float = 0.0,
        jitter: float = 0.0,
        host: str = "127.0.0.1",
    ) -> None:
        if min(delay, upstream_delay, jitter) < 0:
            raise ValueError("delays and jitter are seconds, not negative")
        self.target = target
        self.delay = delay
        self.upstream_delay = upstream_delay
        self.jitter = jitter
        self.host = host
        self.port = 0
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, self.host, 0)
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
        link = _Link(writer, up_writer, (self.upstream_delay, self.delay), self.jitter)
        self._links.add(link)
        await link.run(reader, up_reader)
        self._links.discard(link)


class _Link:
    """One proxied connection: client -> server after ``delays[0]``, server ->
    client after ``delays[1]`` (each plus up to ``jitter``)."""

    def __init__(
        self,
        client: asyncio.StreamWriter,
        server: asyncio.StreamWriter,
        delays: tuple[float, float],
        jitter: float,
    ) -> None:
        self.client = client
        self.server = server
        self.delays = delays
        self.jitter = jitter
        self.held: list[deque[tuple[float, bytes]]] = [deque(), deque()]
        self.tasks: list[asyncio.Task[None]] = []

    async def run(self, client: asyncio.StreamReader, server: asyncio.StreamReader) -> None:
        self.tasks = [
            asyncio.ensure_future(self._pump(client, self.server, 0)),
            asyncio.ensure_future(self._pump(server, self.client, 1)),
        ]
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
        self.abort()

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, direction: int
    ) -> None:
        loop = asyncio.get_running_loop()
        delay = self.delays[direction]
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            if not delay and not self.jitter:
                while chunk := await source.read(CHUNK):
                    sink.write(chunk)
                    await sink.drain()
                return
            held = self.held[direction]
            arrived = asyncio.Event()
            eof = asyncio.Event()
            sender = asyncio.ensure_future(self._send_held(sink, held, arrived, eof))
            try:
                last_due = 0.0
                while chunk := await source.read(CHUNK):
                    due = loop.time() + delay + random.uniform(0.0, self.jitter)
                    last_due = max(last_due, due)  # a stream: never overtake
                    held.append((last_due, chunk))
                    arrived.set()
                eof.set()  # the peer closed: deliver what is held, as a link would
                arrived.set()
                await sender
            finally:
                sender.cancel()

    @staticmethod
    async def _send_held(
        sink: asyncio.StreamWriter,
        held: deque[tuple[float, bytes]],
        arrived: asyncio.Event,
        eof: asyncio.Event,
    ) -> None:
        loop = asyncio.get_running_loop()
        while held or not eof.is_set():
            if not held:
                arrived.clear()
                await arrived.wait()
                continue
            due, chunk = held[0]
            if (wait := due - loop.time()) > 0:
                await asyncio.sleep(wait)
            held.popleft()
            sink.write(chunk)
            await sink.drain()

    def abort(self) -> int:
        dropped = sum(len(chunk) for held in self.held for _, chunk in held)
        for held in self.held:
            held.clear()
        for task in self.tasks:
            task.cancel()
        for writer in (self.client, self.server):
            writer.transport.abort()
        return dropped

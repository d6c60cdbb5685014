"""``/metrics`` of one worker process, answered on the worker's own event loop.

prometheus_client's server answers from a thread, which under load waits for
the GIL several times per scrape (each wait up to the 5 ms switch interval):
scrapes of a busy worker took tens of milliseconds at p99. Here a scrape is one
more callback of the loop that runs the jobs: it waits at most one loop turn,
then rendering the text (a fraction of a millisecond) runs in one go.

It speaks just enough HTTP/1.1 for a scraper: ``GET /metrics`` (or ``/``), one
request per connection, ``Connection: close``. ``--processes N`` keeps the
supervisor on prometheus_client's server (its loop only waits on children).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from conveyor.worker.metrics import client

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

#: A scraper's request line and headers; more is not a scraper.
MAX_REQUEST = 16_384
#: A connection that has not sent its request by then is dropped.
REQUEST_TIMEOUT = 10.0
METRICS_PATHS = (b"/metrics", b"/")


async def serve_on_loop(registry: CollectorRegistry, host: str, port: int) -> asyncio.Server:
    """Start answering scrapes of ``registry`` at http://host:port/metrics; close
    the returned server to stop. A port that cannot be bound raises OSError."""
    prom = client()
    content_type = prom.CONTENT_TYPE_LATEST.encode()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                request = await reader.readuntil(b"\r\n\r\n")
            method, _, rest = request.partition(b" ")
            path = rest.split(b" ", 1)[0].split(b"?", 1)[0]
            if method == b"GET" and path in METRICS_PATHS:
                status, kind, body = b"200 OK", content_type, prom.generate_latest(registry)
            else:
                status, kind, body = b"404 Not Found", b"text/plain", b"not found\n"
            writer.write(
                b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
                b"Connection: close\r\n\r\n%s" % (status, kind, len(body), body)
            )
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass  # a client that went away or never asked: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    return await asyncio.start_server(answer, host, port, limit=MAX_REQUEST)

"""``conveyor serve APP``: dashboard, health, Prometheus metrics and admin API on uvicorn."""

from __future__ import annotations

import errno
import ipaddress
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import click

from conveyor.cli.common import state, url_option
from conveyor.cli.errors import RUNTIME, USAGE, fail
from conveyor.cli.loading import load_app
from conveyor.cli.worker import LEVELS, log_format_option
from conveyor.errors import MissingDependency
from conveyor.logs import LogFormat, setup_logging


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


@click.command("serve")
@click.argument("app_spec", metavar="APP")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--log-level", type=LEVELS, default="info", show_default=True)
@log_format_option
@url_option
def serve_command(
    app_spec: str, host: str, port: int, log_level: str, log_format: LogFormat
) -> None:
    """Serve the dashboard (/), /health/*, /metrics and the /api/v1 admin API for APP.

    Tokens come from the api_tokens setting (CONVEYOR_API_TOKENS). Without any
    token only a loopback address may be bound.
    """
    app = load_app(app_spec, state().url)
    app.backend  # noqa: B018  # builds (does not open) the backend: a bad URL fails here
    if not app.settings.api_tokens and not is_loopback(host):
        fail(
            f"refusing to bind {host}: no API token is configured, so the admin API "
            "would be open to the network. Set CONVEYOR_API_TOKENS (e.g. "
            '\'{"<token>": ["read"]}\') or bind 127.0.0.1',
            USAGE,
        )
    try:
        import uvicorn

        from conveyor.server import create_app
        from conveyor.server.auth import weak_tokens
    except ImportError as exc:
        raise MissingDependency(
            f"conveyor serve needs the server extra: pip install 'conveyor[server]' ({exc})"
        ) from None
    weak = weak_tokens(app.settings.api_tokens) if not is_loopback(host) else []
    if weak:
        fail(
            f"refusing to bind {host}: {len(weak)} API token(s) ({', '.join(weak)}) are too "
            "short to resist guessing from the network (need about 128 bits: 22 or more "
            "random letters and digits). Make one with: python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'",
            USAGE,
        )
    listening = listen(host, port)
    setup_logging(log_level, log_format)
    web = create_app(app)
    config = uvicorn.Config(
        web,
        host=host,
        port=port,
        log_level=log_level.lower(),
        log_config=None,  # keep conveyor's logging setup
        server_header=False,
        # Idle keep-alive connections close after 5 s; past max_connections
        # uvicorn answers 503 instead of piling up slow clients.
        timeout_keep_alive=5,
        limit_concurrency=app.settings.max_connections,
    )
    bound = listening.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    logging.getLogger("conveyor.server").info(
        "serving on http://%s:%d (dashboard /, API /api/v1; Ctrl-C to stop)", shown, bound
    )
    server = quiet_exit_server(uvicorn.Server)(config)
    server.on_exit = web.state.conveyor.live.close_soon  # open dashboard streams end
    server.run(sockets=[listening])


def listen(host: str, port: int) -> socket.socket:
    """Bind before uvicorn starts, so that a port in use is one ``error:`` line
    (uvicorn would log its startup and shutdown around the error, and exit 3)."""
    sock = socket.socket(family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        why = "the port is already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        fail(f"cannot listen on {host}:{port}: {why}", RUNTIME)
    sock.set_inheritable(True)
    return sock


def quiet_exit_server(base: type[Any]) -> type[Any]:
    """uvicorn's Server, except that a stop asked by SIGTERM/SIGINT exits 0 (as
    ``conveyor worker`` does) instead of re-raising the signal once shut down."""

    class Server(base):  # type: ignore[misc]  # uvicorn.Server, imported lazily
        #: Called on SIGINT/SIGTERM, before the wait for open connections.
        on_exit: Callable[[], None] | None = None

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            super().handle_exit(sig, frame)
            if self.on_exit is not None:
                self.on_exit()

        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            handled = (signal.SIGINT, signal.SIGTERM)
            original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
            try:
                yield
            finally:
                for sig, handler in original.items():
                    signal.signal(sig, handler)

    return Server

"""A real ``conveyor serve`` process for the browser tests: the shop app on a
SQLite file, tokens configured, on a free port; it can be restarted on the
same file."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from conveyor.app import Conveyor

from .apps.shop import build
from .conftest import TOKENS

HERE = Path(__file__).parent
T = TypeVar("T")
SERVE = [sys.executable, "-m", "conveyor", "serve", "apps.shop:app"]


def run_async(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to the end on a fresh loop in another thread (the sync
    Playwright API owns an event loop in this one)."""
    result: list[Any] = []
    failure: list[BaseException] = []

    async def main() -> None:
        result.append(await make())

    def target() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    value: T = result[0]
    return value


def with_app(url: str, use: Callable[[Conveyor], Awaitable[T]]) -> T:
    """Open the shop app on ``url``, run ``use(app)``, close it."""

    async def go() -> T:
        async with build(url) as app:
            return await use(app)

    return run_async(go)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Site:
    def __init__(self, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.extra_env = env or {}
        self.url = f"sqlite:///{workdir / 'jobs.db'}"
        self.log_path = workdir / "serve.log"
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
        env["CONVEYOR_URL"] = self.url
        env["CONVEYOR_API_TOKENS"] = json.dumps(TOKENS)
        env.update(self.extra_env)
        with self.log_path.open("a") as log:
            self.proc = subprocess.Popen(
                [*SERVE, "--port", str(self.port), "--log-level", "warning"],
                cwd=HERE,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{self.base}/health/startup").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert self.proc.poll() is None, self.log_path.read_text()
            assert time.monotonic() < deadline, "conveyor serve did not start in 20 s"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def api(self, token: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.request(method, f"{self.base}{path}", headers=headers, **kwargs)

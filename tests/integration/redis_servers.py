"""Private Redis servers for the tests that kill, restart or reconfigure one.

The shared server (``CONVEYOR_TEST_REDIS_URL``) is never stopped or
reconfigured: a test that needs to do that starts its own ``redis-server`` on a
free port in its temp dir, and kills it afterwards.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import redis.asyncio as aioredis

from conveyor.backends.redis.keys import base_for
from support.services import missing_service


def redis_binary(name: str = "redis-server") -> str:
    """The binary's path (``CONVEYOR_REDIS_SERVER`` names redis-server, as in
    scripts/services.sh); skipped locally when missing, a failure under CI."""
    if name == "redis-server":
        name = os.environ.get("CONVEYOR_REDIS_SERVER", name)
    found = shutil.which(name)
    if found is None:
        missing_service(f"{name} is not installed (apt-get install redis-server)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free too (both <= 65535)."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randint(20000, 50000)
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise AssertionError("no free port pair for a cluster node")


def pings(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` process on a free port, with its data in ``directory``."""

    def __init__(self, directory: Path, args: Sequence[str] = (), port: int | None = None) -> None:
        self.directory = directory
        self.args = list(args)
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)

    def url(self, prefix: str = "default", **options: str) -> str:
        query = "&".join([f"prefix={prefix}", *(f"{k}={v}" for k, v in options.items())])
        return f"redis://127.0.0.1:{self.port}/0?{query}"

    def start(self, timeout: float = 10.0) -> None:
        argv = [
            redis_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--save", "",
            "--daemonize", "no",
            "--logfile", str(self.directory / "redis.log"),
            *self.args,
        ]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not pings(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                raise AssertionError(f"redis-server on {self.port} did not start:\n{log}")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final save."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


CLUSTER_NODE_ARGS = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                     "--cluster-node-timeout", "5000", "--appendonly", "no")  # fmt: skip


@contextlib.contextmanager
def redis_cluster(directory: Path, nodes: int = 3) -> Iterator[list[RedisServer]]:
    """``nodes`` masters joined by ``redis-cli --cluster create`` (no replicas)."""
    servers = [
        RedisServer(
            directory / f"node{i}",
            CLUSTER_NODE_ARGS,
            port=free_cluster_port(),
        )
        for i in range(nodes)
    ]
    try:
        for server in servers:
            server.start()
        addresses = [f"127.0.0.1:{s.port}" for s in servers]
        subprocess.run(
            [redis_binary("redis-cli"), "--cluster", "create", *addresses,
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not _cluster_ok(servers[0].port):
            if time.monotonic() > deadline:
                raise AssertionError("the local Redis Cluster did not reach cluster_state:ok")
            time.sleep(0.1)
        yield servers
    finally:
        for server in servers:
            server.kill()


def _cluster_ok(port: int) -> bool:
    out = subprocess.run(
        [redis_binary("redis-cli"), "-p", str(port), "cluster", "info"],
        capture_output=True, text=True, timeout=10,
    )  # fmt: skip
    return "cluster_state:ok" in out.stdout


def key_pattern(prefix: str) -> str:
    return base_for(prefix) + "*"


async def delete_prefix(url: str, prefix: str) -> None:
    """Delete every key of the app ``prefix`` on the server at ``url``."""
    client = aioredis.Redis.from_url(url)
    try:
        keys = [key async for key in client.scan_iter(key_pattern(prefix))]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()

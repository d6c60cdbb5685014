"""The store each system runs on, fresh for every repetition of every workload.

- SQLite: a new temp dir per run (the side names its own files in it).
- Redis: a ``redis-server`` of the benchmark's own on a free port, persistence off
  for every system alike (``--appendonly no --save ''``), emptied (FLUSHALL on
  that private server only) before each run. A shared Redis is never touched.
- PostgreSQL: a new database per run (``CREATE DATABASE bench_…``, dropped after)
  on the server the admin URL names (the local one on 5432 by default).
- RabbitMQ: a private broker node for the whole run (or ``--amqp-url``), a fresh
  vhost per run, deleted after; conveyor also gets a fresh PostgreSQL database.

Each store can read its server's CPU time (``/proc/PID/stat``: utime + stime),
which W1 reports for the enqueue and the drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from benchmarks.harness import BenchError

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_cpu_seconds(pid: int, reaped: bool = False) -> float:
    """utime + stime of ``pid`` (all its threads), in seconds; with ``reaped``, also
    that of its children that have exited (a server's finished backends)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLOCK_TICKS


class Store:
    """No server (SQLite): the side makes its files in the run's temp dir."""

    kind = "sqlite"

    @contextlib.contextmanager
    def fresh(self, label: str) -> Iterator[str | None]:
        yield None

    def cpu_seconds(self) -> float | None:
        return None

    def memory_bytes(self) -> int:
        raise BenchError(f"no server memory figure on {self.kind}")

    def close(self) -> None:
        pass

    def facts(self) -> dict[str, str]:
        return {}


class RedisStore(Store):
    """A private redis-server for the whole benchmark run."""

    kind = "redis"

    def __init__(self, binary: str = "redis-server") -> None:
        path = shutil.which(binary)
        if path is None:
            raise BenchError(f"{binary} not found: install Redis (apt-get install redis-server)")
        self.dir = Path(tempfile.mkdtemp(prefix="bench-redis-"))
        self.port = free_port()
        self.args = ["--appendonly", "no", "--save", "", "--maxmemory-policy", "noeviction"]
        cmd = [path, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir)]
        cmd += [*self.args, "--logfile", str(self.dir / "redis.log")]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 20
        while self._cli("PING") != "PONG":
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"redis-server on port {self.port} did not start")
            time.sleep(0.05)
        self.version = self._cli("INFO", "server").partition("redis_version:")[2].split()[0]

    def _cli(self, *args: str) -> str:
        out = subprocess.run(
            ["redis-cli", "-p", str(self.port), *args],
            capture_output=True,
            text=True,
            check=False,
        )
        return out.stdout.strip()

    @contextlib.contextmanager
    def fresh(self, label: str) -> Iterator[str | None]:
        if self._cli("FLUSHALL") != "OK":  # our own server, nobody else's data
            raise BenchError("FLUSHALL on the benchmark's redis-server failed")
        yield self.url

    def cpu_seconds(self) -> float | None:
        return process_cpu_seconds(self.proc.pid)

    def memory_bytes(self) -> int:
        """``used_memory`` from ``INFO memory``: what the allocator holds for data."""
        info = self._cli("INFO", "memory")
        return int(info.partition("used_memory:")[2].split()[0])

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def facts(self) -> dict[str, str]:
        return {
            "redis": self.version,
            "redis_server": f"own redis-server on 127.0.0.1:{self.port}, "
            + " ".join(a if a else "''" for a in self.args),
        }


class PostgresStore(Store):
    """A fresh database per run on an existing server, dropped afterwards."""

    kind = "postgres"

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.version = self._admin("SHOW server_version")
        self.settings = {
            name: self._admin(f"SHOW {name}")
            for name in ("fsync", "synchronous_commit", "shared_buffers", "max_connections")
        }
        self.postmaster = self._postmaster()

    def _postmaster(self) -> int | None:
        """The server's main process, if it runs on this machine (for its CPU): the
        parent of our own backend, read while that backend is alive."""

        async def go() -> int | None:
            import asyncpg

            conn = await asyncpg.connect(self.admin_url)
            try:
                backend = await conn.fetchval("SELECT pg_backend_pid()")
                stat = Path(f"/proc/{backend}/stat").read_text()  # noqa: ASYNC240  # tiny
            except OSError:
                return None
            finally:
                await conn.close()
            return int(stat[stat.rindex(")") + 2 :].split()[1])

        return asyncio.run(go())

    def _admin(self, sql: str) -> str:
        async def go() -> str:
            import asyncpg

            conn = await asyncpg.connect(self.admin_url)
            try:
                return str(await conn.fetchval(sql) or "")
            finally:
                await conn.close()

        return asyncio.run(go())

    @staticmethod
    def url_for_database(admin_url: str, database: str) -> str:
        return urlunsplit(urlsplit(admin_url)._replace(path=f"/{database}"))

    def url_for(self, database: str) -> str:
        return self.url_for_database(self.admin_url, database)

    @contextlib.contextmanager
    def fresh(self, label: str) -> Iterator[str | None]:
        safe = "".join(c if c.isalnum() else "_" for c in label.lower())
        database = f"bench_{safe}_{uuid.uuid4().hex[:8]}"
        self._admin(f'CREATE DATABASE "{database}"')
        try:
            yield self.url_for(database)
        finally:
            self._admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

    def cpu_seconds(self) -> float | None:
        """All of the server's processes: the postmaster and its backends."""
        if self.postmaster is None:
            return None
        total = 0.0
        pids = [self.postmaster]
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{self.postmaster}/task/{self.postmaster}/children")
            pids += [int(p) for p in children.read_text().split()]
        for pid in pids:
            with contextlib.suppress(OSError, ValueError):
                total += process_cpu_seconds(pid, reaped=pid == self.postmaster)
        return total

    def facts(self) -> dict[str, str]:
        parts = urlsplit(self.admin_url)
        shown = ", ".join(f"{k}={v}" for k, v in self.settings.items())
        return {
            "postgres": self.version,
            "postgres_server": f"{parts.hostname}:{parts.port or 5432}, fresh database per run; "
            + shown,
        }


class RabbitStore(Store):
    """RabbitMQ for every system, and PostgreSQL beside it for conveyor's state.

    The broker is a private node the run starts (tests/support/rabbit_node.py:
    Debian's ``rabbitmq-server`` on free ports; the shared broker on 5672 is
    never touched, and other people's tests cannot restart it under the run),
    or the one ``amqp_url`` names. Each run gets a fresh vhost, deleted after.
    ``fresh`` yields its AMQP URL; ``fresh_pair`` also a fresh PostgreSQL
    database, for conveyor. ``cpu_seconds`` is the broker's; ``pair_cpu_seconds``
    adds PostgreSQL's.
    """

    kind = "rabbitmq"

    def __init__(self, pg_url: str, amqp_url: str | None = None) -> None:
        self.postgres = PostgresStore(pg_url)
        self.node: Any = None
        # The node's process belongs to the loop that started it: one loop for all.
        self.loop = asyncio.new_event_loop()
        if amqp_url is None:
            root = str(Path(__file__).resolve().parent.parent / "tests")
            if root not in sys.path:
                sys.path.insert(0, root)
            from support import rabbit_node

            missing = rabbit_node.available()
            if missing:
                raise BenchError(f"a private RabbitMQ node cannot start: {missing}")
            self.node = rabbit_node.RabbitNode()
            self.loop.run_until_complete(self.node.start())
            amqp_url = self.node.url
        self.amqp_url = amqp_url
        self.version = self._server_version()

    def _ctl(self, *args: str) -> str:
        if self.node is None:
            ctl = shutil.which("rabbitmqctl", path=f"{os.environ.get('PATH', '')}:/usr/sbin")
            out = subprocess.run(
                [ctl or "rabbitmqctl", *args], capture_output=True, text=True, check=False
            )
            if out.returncode:
                raise BenchError(f"rabbitmqctl {' '.join(args)}: {out.stdout}{out.stderr}")
            return out.stdout
        return str(self.loop.run_until_complete(self.node.ctl(*args)))

    def _server_version(self) -> str:
        async def go() -> str:
            import aio_pika

            connection = await aio_pika.connect(self.amqp_url)
            async with connection:
                properties = connection.transport.connection.server_properties
                return str(properties.get("version", "?"))

        return self.loop.run_until_complete(go())

    def vhost_url(self, vhost: str) -> str:
        return urlunsplit(urlsplit(self.amqp_url)._replace(path=f"/{vhost}"))

    @contextlib.contextmanager
    def fresh(self, label: str) -> Iterator[str | None]:
        safe = "".join(c if c.isalnum() else "_" for c in label.lower())
        vhost = f"bench_{safe}_{uuid.uuid4().hex[:8]}"
        self._ctl("add_vhost", vhost)
        try:
            self._ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
            yield self.vhost_url(vhost)
        finally:
            self._ctl("delete_vhost", vhost)

    @contextlib.contextmanager
    def fresh_pair(self, label: str) -> Iterator[tuple[str, str]]:
        """(PostgreSQL URL, AMQP URL), both fresh."""
        with self.postgres.fresh(label) as sql, self.fresh(label) as amqp:
            assert sql is not None
            assert amqp is not None
            yield sql, amqp

    def cpu_seconds(self) -> float | None:
        if self.node is None:
            return None  # a broker we did not start: its CPU is not ours to read
        pids = self.node.beam_pids()
        return sum(process_cpu_seconds(pid) for pid in pids) if pids else None

    def pair_cpu_seconds(self) -> float | None:
        broker, sql = self.cpu_seconds(), self.postgres.cpu_seconds()
        return broker + sql if broker is not None and sql is not None else None

    def close(self) -> None:
        try:
            if self.node is not None:
                self.loop.run_until_complete(self.node.stop())
        finally:
            self.loop.close()

    def facts(self) -> dict[str, str]:
        where = "own node on a free port" if self.node else self.amqp_url.rpartition("@")[2]
        return {
            "rabbitmq": self.version,
            "rabbitmq_server": f"{where}, fresh vhost per run",
            **self.postgres.facts(),
        }

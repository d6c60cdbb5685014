"""A private RabbitMQ node for the tests that fault the broker hard (SIGKILL,
memory and disk alarms): Debian's ``rabbitmq-server`` on free ports, with its
own node name, data directory, logs and config, as ``scripts/services.sh``
starts one when nothing answers on 5672. The shared broker other tests use is
never touched.

Needs ``rabbitmq-server`` installed; as root it runs as the ``rabbitmq`` user
(runuser), as the Debian package expects.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

#: How long a node may take to answer AMQP on a loaded machine.
START_TIMEOUT = 120.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _which(name: str) -> str | None:
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")


def available() -> str | None:
    """Why a private node cannot start here, or None when it can."""
    if _which("rabbitmq-server") is None:
        return "rabbitmq-server is not installed (apt-get install rabbitmq-server)"
    if os.geteuid() == 0 and _which("runuser") is None:
        return "running as root, a private node needs runuser"
    return None


def amqp_answers(port: int) -> bool:
    """True when a broker on ``port`` answers the AMQP header with connection.start."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"AMQP\x00\x00\x09\x01")
            sock.settimeout(2)
            return sock.recv(8)[:1] == b"\x01"
    except OSError:
        return False


class RabbitNode:
    """One private node: ``start()``, ``kill()`` (SIGKILL to its Erlang VM),
    ``ctl(...)`` (rabbitmqctl against it) and ``stop()``."""

    def __init__(self) -> None:
        # Under /tmp, not pytest's tmp_path: the rabbitmq user must reach it,
        # and pytest's directories are private to the user running the tests.
        self.base = Path(tempfile.mkdtemp(prefix="conveyor-rabbit-"))
        self.dir = self.base / "rabbitmq"
        (self.dir / "mnesia").mkdir(parents=True, exist_ok=True)
        (self.dir / "log").mkdir(exist_ok=True)
        self.port = _free_port()
        self.dist_port = _free_port()
        self.node = f"conveyor-test-{uuid.uuid4().hex[:8]}@localhost"
        (self.dir / "rabbitmq.conf").write_text(
            f"loopback_users = none\nlisteners.tcp.default = 127.0.0.1:{self.port}\n"
        )
        (self.dir / "enabled_plugins").write_text("[].\n")
        self.process: asyncio.subprocess.Process | None = None
        self._as: list[str] = []
        if os.geteuid() == 0:
            subprocess.run(["chown", "-R", "rabbitmq", str(self.base)], check=True)
            self._as = [str(_which("runuser")), "-u", "rabbitmq", "--"]
        self._env = [
            "env",
            f"RABBITMQ_NODENAME={self.node}",
            f"RABBITMQ_NODE_PORT={self.port}",
            f"RABBITMQ_DIST_PORT={self.dist_port}",
            f"RABBITMQ_MNESIA_BASE={self.dir / 'mnesia'}",
            f"RABBITMQ_LOG_BASE={self.dir / 'log'}",
            f"RABBITMQ_CONFIG_FILE={self.dir / 'rabbitmq.conf'}",
            f"RABBITMQ_ENABLED_PLUGINS_FILE={self.dir / 'enabled_plugins'}",
            f"HOME={self.dir}",
        ]

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    async def start(self) -> None:
        """Start the node (again, on the same data after a kill) and wait for AMQP."""
        with (self.dir / "server.log").open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *self._as,
                *self._env,
                str(_which("rabbitmq-server")),
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True,  # its own group: stopped as one
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not await asyncio.to_thread(amqp_answers, self.port):
            if self.process.returncode is not None or time.monotonic() > deadline:
                tail = (self.dir / "server.log").read_text(errors="replace")[-3000:]
                raise AssertionError(f"the private RabbitMQ node did not start:\n{tail}")
            await asyncio.sleep(0.2)

    def beam_pids(self) -> list[int]:
        """The node's Erlang VM (beam.smp), found in the process group it was
        started in."""
        if self.process is None:
            return []
        listing = subprocess.run(
            ["ps", "-eo", "pid=,pgid=,comm="], capture_output=True, text=True, check=True
        )
        pids = []
        for line in listing.stdout.splitlines():
            pid, pgid, comm = line.split(None, 2)
            if int(pgid) == self.process.pid and comm.startswith("beam"):
                pids.append(int(pid))
        return pids

    async def kill(self) -> None:
        """SIGKILL the node's Erlang VM: no shutdown, no flush; then reap its group."""
        pids = self.beam_pids()
        assert pids, f"no beam process for {self.node}"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while await asyncio.to_thread(amqp_answers, self.port):
            assert time.monotonic() < deadline, "the killed node still answers"
            await asyncio.sleep(0.1)
        await self._end_group()

    async def ctl(self, *args: str, timeout: float = 60.0) -> str:
        """``rabbitmqctl -n <node> args...``; fails with its output."""
        process = await asyncio.create_subprocess_exec(
            *self._as,
            *self._env,
            str(_which("rabbitmqctl") or "rabbitmqctl"),
            "-n",
            self.node,
            # The CLI reads the rabbitmq user's cookie, not the one the node
            # made in its own HOME.
            "--erlang-cookie",
            (self.dir / ".erlang.cookie").read_text().strip(),
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await asyncio.wait_for(process.communicate(), timeout)
        text = output.decode(errors="replace")
        assert process.returncode == 0, f"rabbitmqctl {' '.join(args)}: {text}"
        return text

    async def _end_group(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.process.wait(), 10)
        self.process = None

    async def stop(self) -> None:
        """Stop the node for good (SIGKILL: its data is thrown away)."""
        for pid in self.beam_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await self._end_group()
        shutil.rmtree(self.base, ignore_errors=True)

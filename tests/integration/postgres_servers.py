"""Private PostgreSQL servers for the tests that stop or restart one.

The shared server (``CONVEYOR_TEST_POSTGRES_URL``) is never stopped: a test
that needs to do that runs its own cluster (initdb + pg_ctl on a free port, in
a temp dir, as user postgres when we are root), and destroys it afterwards.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from support.services import missing_service


def bindir() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    if initdb is None:
        missing_service("initdb not found: install the PostgreSQL server binaries")
    return Path(initdb).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OwnServer:
    """A throwaway PostgreSQL cluster (run as user postgres when we are root)."""

    def __init__(self, listen: tuple[str, ...] = ()) -> None:
        #: Addresses to listen on besides 127.0.0.1 (clients from 10.0.0.0/8 are trusted).
        self.listen = listen
        self.bindir = bindir()
        self.dir = Path(tempfile.mkdtemp(prefix="conveyor-pg-restart-"))
        self.dir.chmod(0o755)  # the server user must reach it
        self.data = self.dir / "data"
        self.port = free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
            # runuser lives in sbin, which a minimal PATH (cron, env -i) leaves out.
            runuser = shutil.which("runuser", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
            assert runuser, "runuser (util-linux) is needed to run PostgreSQL as root"
            self.as_user = [runuser, "-u", "postgres", "--"]
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str) -> None:
        subprocess.run([*self.as_user, *argv], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
            "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C",
        )  # fmt: skip
        if self.listen:
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write("host all all 10.0.0.0/8 trust\n")

    def start(self) -> None:
        addresses = ",".join(("127.0.0.1", *self.listen))
        options = f"-p {self.port} -k {self.dir} -c listen_addresses={addresses} -c fsync=off"
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "log"),
            "-w", "-t", "60", "-o", options, "start",
        )  # fmt: skip

    def stop_immediate(self) -> None:
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"
        )

    def destroy(self) -> None:
        subprocess.run(
            [*self.as_user, str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
             "-w", "stop"],
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        shutil.rmtree(self.dir, ignore_errors=True)

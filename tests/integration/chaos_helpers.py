"""Harness for the chaos suite: real worker processes on one store.

A :class:`Cluster` owns one test's store (a SQLite file by default; with
``store="postgres"`` or ``"redis"`` a fresh schema or key prefix on the test
server, from :mod:`support.kits`, dropped afterwards), its side-table
directory, its log files and every subprocess it started. Each process runs in its own
session (process group) and is killed with its whole group when the cluster
closes, even when the test failed: no orphans.

Workers are started as ``python -m conveyor worker APP -c N``; with
``CONVEYOR_CHAOS_LAUNCHER=1`` they are started through :data:`LAUNCHER`, a
``python -c`` that runs ``app.worker(concurrency=N).run()`` (to tell a CLI
problem from a worker problem).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from chaos_apps.app import make_app
from chaos_apps.recorder import RUNS_DIR_ENV, Run, read_runs

from conveyor.app import Conveyor
from conveyor.job import Job
from support.kits import KITS, UrlKit

REPO = Path(__file__).resolve().parents[2]
APP = "tests.integration.chaos_apps.app:app"
PRODUCER = "tests.integration.chaos_apps.producer"

#: Short timings so faults play out in seconds, not minutes. Not the lease: a
#: host pause longer than a short one makes a worker drop its own job, which
#: then runs again. Tests about leases and stall recovery ask for SHORT_LEASE.
FAST = {
    "CONVEYOR_LEASE": "60s",
    "CONVEYOR_STALL_INTERVAL": "0.5s",
    "CONVEYOR_POLL_INTERVAL": "0.05s",
    "CONVEYOR_HEARTBEAT_INTERVAL": "1s",
    "CONVEYOR_SHUTDOWN_TIMEOUT": "10s",
}
#: For workers whose jobs a test needs recovered (or fenced) within seconds.
SHORT_LEASE = {"CONVEYOR_LEASE": "1s"}

LAUNCHER = """
import asyncio, importlib, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                    format="%(asctime)s %(levelname)s %(name)s: %(message)s")
module, _, attr = sys.argv[1].partition(":")
app = getattr(importlib.import_module(module), attr)
asyncio.run(app.worker(concurrency=int(sys.argv[2])).run())
"""


def use_launcher() -> bool:
    return os.environ.get("CONVEYOR_CHAOS_LAUNCHER") == "1"


def worker_argv(app: str, concurrency: int, extra: Sequence[str] = ()) -> list[str]:
    """``python -m conveyor worker APP -c N``, or the launcher when asked for."""
    if not use_launcher():
        return [sys.executable, "-m", "conveyor", "worker", app, "-c", str(concurrency), *extra]
    if extra:
        pytest.skip(f"the launcher takes no CLI options: {extra}")
    return [sys.executable, "-c", LAUNCHER, app, str(concurrency)]


def producer_argv(
    out: Path,
    count: int,
    seed: int = 0,
    keys: bool = False,
    seconds: float = 0.0,
    attempts: int | None = None,
) -> list[str]:
    """A producer process (:mod:`chaos_apps.producer`) writing its acks to ``out``;
    its jobs (``chaos.sleep``) sleep ``seconds`` and have ``attempts`` attempts
    (the task's default when None)."""
    argv = [sys.executable, "-m", PRODUCER, "--out", str(out), "--count", str(count)]
    argv += ["--seed", str(seed), "--seconds", str(seconds)]
    argv += ["--attempts", str(attempts)] if attempts is not None else []
    return [*argv, *(["--keys"] if keys else [])]


@dataclass
class Proc:
    """One subprocess with its output in files (never a pipe that can fill up)."""

    name: str
    popen: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        return self.stdout.read_text(errors="replace") + self.stderr.read_text(errors="replace")

    def err(self) -> str:
        return self.stderr.read_text(errors="replace")

    def tail(self, lines: int = 25) -> str:
        text = self.err().splitlines()[-lines:]
        return f"--- {self.name} (pid {self.pid}, rc {self.popen.returncode}) stderr tail ---\n" + (
            "\n".join(text) or "(empty)"
        )

    def signal(self, signum: int, group: bool = False) -> None:
        """Send ``signum`` to the process, or to its whole process group."""
        if group:
            os.killpg(self.pid, signum)
        else:
            os.kill(self.pid, signum)

    async def wait_exit(self, timeout: float, what: str = "") -> int:
        """Wait for the process to exit; fail with its stderr tail after ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.popen.poll() is None:
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"{self.name} did not exit within {timeout:g}s {what}\n{self.tail()}"
                )
            await asyncio.sleep(0.02)
        return self.popen.returncode


#: The stores the process-level chaos tests run on (the memory store has no
#: processes to kill: it lives inside one).
CHAOS_STORES = ("sqlite", "postgres", "redis")


class Cluster:
    """One test's world: a store, a side-table dir, logs and subprocesses."""

    def __init__(self, tmp_path: Path, store: str = "sqlite") -> None:
        if store not in CHAOS_STORES:
            raise ValueError(f"no chaos store {store!r}; known: {CHAOS_STORES}")
        self.dir = tmp_path
        self.store = store
        self.db_path = tmp_path / "conveyor.db"
        self._kit: UrlKit | None = None
        if store == "sqlite":
            self.url = f"sqlite:///{self.db_path}"
        else:
            self._kit = KITS[store](tmp_path)
            self.url = self._kit.shared_url()
        self.runs_dir = tmp_path / "runs"
        self.logs_dir = tmp_path / "logs"
        self.runs_dir.mkdir()
        self.logs_dir.mkdir()
        self.procs: list[Proc] = []
        self._app: Conveyor | None = None

    async def __aenter__(self) -> Cluster:
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            self.kill_all()
        finally:
            try:
                if self._app is not None:
                    await self._app.close()
            finally:
                if self._kit is not None:
                    await self._kit.cleanup()

    # -- processes -------------------------------------------------------------
    def env(self, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
        path = env.get("PYTHONPATH")
        env["PYTHONPATH"] = f"{REPO}{os.pathsep}{path}" if path else str(REPO)
        env["PYTHONUNBUFFERED"] = "1"
        env["CONVEYOR_URL"] = self.url
        env[RUNS_DIR_ENV] = str(self.runs_dir)
        env.update(FAST)
        env.update(overrides or {})
        return env

    def spawn(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> Proc:
        n = sum(1 for p in self.procs if p.name.split("#")[0] == name)
        label = f"{name}#{n}"
        stdout = self.logs_dir / f"{label}.out"
        stderr = self.logs_dir / f"{label}.err"
        with stdout.open("wb") as out, stderr.open("wb") as err:
            popen = subprocess.Popen(
                list(argv),
                cwd=REPO,
                env=self.env(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        proc = Proc(label, popen, stdout, stderr)
        self.procs.append(proc)
        return proc

    def start_worker(
        self,
        concurrency: int,
        env: Mapping[str, str] | None = None,
        name: str = "worker",
        extra: Sequence[str] = (),
    ) -> Proc:
        return self.spawn(name, worker_argv(APP, concurrency, extra), env)

    def kill_all(self) -> None:
        """SIGKILL every process group we started, and every descendant's group
        (a supervisor puts its children in groups of their own). SIGCONT first:
        a process may be stopped."""
        pids: list[int] = []
        for proc in self.procs:
            if proc.alive:
                pids += [proc.pid, *descendants(proc.pid)]
        for pid in pids:
            for signum in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signum)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=10)

    def freeze(self, proc: Proc, attempts: int = 20) -> None:
        """SIGSTOP ``proc``'s group at a moment it holds no SQLite write lock.

        A process stopped inside a write transaction blocks every writer of the
        file until it resumes: SQLite cannot break another process's lock, so
        that is a limitation of the embedded backend, not what we test here.
        """
        if self.store != "sqlite":
            proc.signal(signal.SIGSTOP, group=True)
            return
        for _ in range(attempts):
            proc.signal(signal.SIGSTOP, group=True)
            if write_lock_free(self.db_path):
                return
            proc.signal(signal.SIGCONT, group=True)
            time.sleep(0.05)
        raise AssertionError(f"{proc.name} held the write lock at each of {attempts} SIGSTOPs")

    def tails(self) -> str:
        return "\n".join(proc.tail() for proc in self.procs)

    def stderr_of_all(self) -> dict[str, str]:
        return {proc.name: proc.err() for proc in self.procs}

    # -- the test process's own view ------------------------------------------------
    async def app(self) -> Conveyor:
        """The test process's app on this cluster's file (same tasks as the workers)."""
        if self._app is None:
            self._app = make_app(self.url)
            await self._app.connect()
        return self._app

    def runs(self) -> list[Run]:
        return read_runs(self.runs_dir)

    def run_counts(self) -> Counter[str]:
        return Counter(run.job_id for run in self.runs())

    async def wait_until(
        self,
        predicate: Callable[[], Any] | Callable[[], Awaitable[Any]],
        timeout: float,
        message: str | Callable[[], str],
        interval: float = 0.05,
    ) -> Any:
        """Poll ``predicate`` until truthy (returned); fail after ``timeout`` with
        ``message`` and every process's stderr tail."""
        return await wait_until(predicate, timeout, message, interval, self.tails)


def write_lock_free(db_path: Path, wait: float = 0.25) -> bool:
    """True when a write transaction can start on ``db_path`` within ``wait`` seconds."""
    with closing(sqlite3.connect(db_path, timeout=wait, isolation_level=None)) as db:
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return False
            raise
        db.execute("ROLLBACK")
    return True


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc), children first."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    queue = [pid]
    while queue:
        children = parents.get(queue.pop(0), [])
        found += children
        queue += children
    return found


async def wait_until(
    predicate: Callable[[], Any] | Callable[[], Awaitable[Any]],
    timeout: float,
    message: str | Callable[[], str],
    interval: float = 0.05,
    diagnostics: Callable[[], str] | None = None,
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            extra = f"\n{diagnostics()}" if diagnostics else ""
            raise AssertionError(f"after {timeout:g}s: {text}{extra}")
        await asyncio.sleep(interval)


async def get_jobs(app: Conveyor, ids: Sequence[str]) -> dict[str, Job]:
    """``{job_id: Job}`` for ``ids`` (one query per 500 ids)."""
    found: dict[str, Job] = {}
    backend = await app.connect()
    for i in range(0, len(ids), 500):
        for job in await backend.get_jobs(ids[i : i + 500]):
            found[job.id] = job
    return found


#: Where the chaos tests append their figures (one JSON object a line) for
#: ``scripts/chaos.sh``, which turns them into ``docs/reliability.md``.
REPORT_ENV = "CONVEYOR_CHAOS_REPORT"


def long_run() -> bool:
    """``CONVEYOR_CHAOS_LONG=1``: the long variants (minutes of faults), not CI's."""
    return os.environ.get("CONVEYOR_CHAOS_LONG") == "1"


def report(
    fault: str,
    store: str,
    *,
    jobs: int,
    faults: int,
    lost: int,
    duplicated: int,
    bound: int,
    passed: bool,
    note: str = "",
    lost_bound: int = 0,
    hosts: Sequence[Mapping[str, Any]] = (),
) -> None:
    """Append one row of figures to ``$CONVEYOR_CHAOS_REPORT`` (when set).

    Called before the test's assertions, so a failing run still leaves its row
    (marked failed) for the report. ``lost_bound`` is 0 but for a fault whose
    loss the row measures (a Redis failover without WAIT mode). ``hosts``:
    throughput per worker host (``host``, ``jobs``, ``per_second``), for the
    report's throughput table."""
    path = os.environ.get(REPORT_ENV)
    print(
        f"\n{fault} on {store}: {jobs} jobs, {faults} faults, {lost} lost, "
        f"{duplicated} duplicated (bound {bound}){' ' + note if note else ''}"
        + (f" (lost bound {lost_bound})" if lost_bound else "")
    )
    if not path:
        return
    row = {
        "fault": fault,
        "store": store,
        "jobs": jobs,
        "faults": faults,
        "lost": lost,
        "lost_bound": lost_bound,
        "duplicated": duplicated,
        "bound": bound,
        "passed": passed,
        "note": note,
        "long": long_run(),
    }
    if hosts:
        row["hosts"] = [dict(host) for host in hosts]
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")

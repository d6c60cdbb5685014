"""The side table: one row per run of a job, written by the handler itself.

Each process writes its own SQLite file ``$CHAOS_RUNS_DIR/runs-<pid>.sqlite``
(autocommit, WAL), so the recorder never contends with another process, never
meets a lock, and never perturbs the timing of conveyor's own database. A
committed row survives SIGKILL of its writer (it is in the OS page cache).

Columns: ``job_id, task, pid, worker_id, attempt`` (``ctx.job.attempts``, this
run included), ``started`` and ``ended`` (``time.time()``; ``ended`` is NULL
when the run never finished: killed or stopped), ``outcome`` (``done``,
``cancelled``, ``error``, ``done-after-cancel``).

A second table, ``renewals``, holds one row per lease renewal round trip of a
worker that asked for it (:data:`RECORD_RENEWALS_ENV`): ``pid, at, seconds,
failed``.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUNS_DIR_ENV = "CHAOS_RUNS_DIR"
#: ``1``: the worker records each lease renewal round trip (``renewals``).
RECORD_RENEWALS_ENV = "CHAOS_RECORD_RENEWALS"

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL,
    task TEXT NOT NULL,
    pid INTEGER NOT NULL,
    worker_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    started REAL NOT NULL,
    ended REAL,
    outcome TEXT
);
CREATE TABLE IF NOT EXISTS renewals (
    id INTEGER PRIMARY KEY,
    pid INTEGER NOT NULL,
    at REAL NOT NULL,
    seconds REAL NOT NULL,
    failed INTEGER NOT NULL
)
"""


class Recorder:
    """Writes run rows for the current process (re-opens after a fork)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._pid = 0

    def _conn(self) -> sqlite3.Connection:
        pid = os.getpid()
        if self._db is None or self._pid != pid:
            directory = os.environ.get(RUNS_DIR_ENV)
            if not directory:
                raise RuntimeError(f"{RUNS_DIR_ENV} is not set: nowhere to record runs")
            db = sqlite3.connect(
                Path(directory) / f"runs-{pid}.sqlite",
                isolation_level=None,
                check_same_thread=False,
            )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=OFF")
            db.executescript(SCHEMA)
            self._db, self._pid = db, pid
        return self._db

    def start(self, job_id: str, task: str, worker_id: str, attempt: int) -> int:
        with self._lock:
            cursor = self._conn().execute(
                "INSERT INTO runs (job_id, task, pid, worker_id, attempt, started)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (job_id, task, os.getpid(), worker_id, attempt, time.time()),
            )
            assert cursor.lastrowid is not None
            return cursor.lastrowid

    def end(self, run_id: int, outcome: str) -> None:
        with self._lock:
            self._conn().execute(
                "UPDATE runs SET ended = ?, outcome = ? WHERE id = ?",
                (time.time(), outcome, run_id),
            )

    def renewal(self, seconds: float, failed: bool) -> None:
        with self._lock:
            self._conn().execute(
                "INSERT INTO renewals (pid, at, seconds, failed) VALUES (?, ?, ?, ?)",
                (os.getpid(), time.time(), seconds, int(failed)),
            )


RECORDER = Recorder()


@contextmanager
def recorded(ctx: Any) -> Iterator[int]:
    """Record one run of ``ctx.job`` around the handler's body."""
    job = ctx.job
    run_id = RECORDER.start(job.id, job.task, ctx.worker_id, job.attempts)
    try:
        yield run_id
    except asyncio.CancelledError:
        RECORDER.end(run_id, "cancelled")
        raise
    except BaseException:
        RECORDER.end(run_id, "error")
        raise
    else:
        RECORDER.end(run_id, "done")


# -- reading (the test process) -------------------------------------------------


@dataclass(frozen=True, slots=True)
class Run:
    job_id: str
    task: str
    pid: int
    worker_id: str
    attempt: int
    started: float
    ended: float | None
    outcome: str | None


def read_runs(directory: Path) -> list[Run]:
    """Every run recorded by every process under ``directory``, oldest first."""
    runs: list[Run] = []
    for path in sorted(directory.glob("runs-*.sqlite")):
        with closing(sqlite3.connect(path, timeout=10)) as db:
            try:
                rows = db.execute(
                    "SELECT job_id, task, pid, worker_id, attempt, started, ended, outcome"
                    " FROM runs"
                ).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    continue  # the writer is still creating it
                raise
        runs.extend(Run(*row) for row in rows)
    runs.sort(key=lambda run: run.started)
    return runs


@dataclass(frozen=True, slots=True)
class Renewal:
    pid: int
    at: float
    seconds: float
    failed: bool


def read_renewals(directory: Path) -> list[Renewal]:
    """Every lease renewal round trip recorded under ``directory``, oldest first."""
    renewals: list[Renewal] = []
    for path in sorted(directory.glob("runs-*.sqlite")):
        with closing(sqlite3.connect(path, timeout=10)) as db:
            try:
                rows = db.execute("SELECT pid, at, seconds, failed FROM renewals").fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    continue
                raise
        renewals.extend(Renewal(pid, at, took, bool(failed)) for pid, at, took, failed in rows)
    renewals.sort(key=lambda renewal: renewal.at)
    return renewals

"""The CLI in subprocesses (``python -m conveyor ...``) against a temporary SQLite file.

Test apps live in ``apps/`` and are named ``apps.<module>:app``: commands run
with this folder as their working directory, which the CLI puts on
``sys.path`` (as uvicorn does).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
APP = "apps.basic:app"


@dataclass
class Cli:
    url: str
    cwd: Path
    env: dict[str, str]
    background: list[subprocess.Popen[str]] = field(default_factory=list)

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "conveyor", *args]

    def run(
        self, *args: str, ok: bool = True, input: str | None = None, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.command(*args),
            cwd=self.cwd,
            env=self.env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if ok and done.returncode != 0:
            raise AssertionError(
                f"conveyor {' '.join(args)} exited {done.returncode}\n"
                f"stdout: {done.stdout}\nstderr: {done.stderr}"
            )
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json").stdout)

    def enqueue(self, task: str, payload: dict[str, Any] | None = None, *options: str) -> str:
        args = ["enqueue", task, *options]
        if payload is not None:
            args += ["--payload", json.dumps(payload)]
        job_id = self.run(*args).stdout.strip()
        assert len(job_id) == 26, job_id
        return job_id

    def job(self, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = self.json("jobs", "show", job_id)
        return job

    def start(self, *args: str, log: Path) -> subprocess.Popen[str]:
        """Run a long command in the background, its output going to ``log``."""
        with log.open("w") as out:
            proc = subprocess.Popen(
                self.command(*args),
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        self.background.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.background:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)


def wait_until(check: Callable[[], Any], timeout: float = 20, every: float = 0.2) -> Any:
    """Poll ``check`` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {check}")
        time.sleep(every)


def clean_env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env["CONVEYOR_URL"] = url
    return env


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    # The store exists (empty) from the start: read commands refuse a missing file.
    (tmp_path / "jobs.db").touch()
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    runner = Cli(url=url, cwd=HERE, env=clean_env(url))
    yield runner
    runner.stop_all()

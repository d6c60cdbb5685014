"""``--log-format json`` on the long-running commands, and escaped text lines:
a job's exception message cannot forge a log record."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from .conftest import APP, Cli, wait_until

pytestmark = pytest.mark.slow

FORGED = "2020-01-01 00:00:00,000 INFO    conveyor.jobs: add 0 completed"
HOSTILE = f"first\n{FORGED}\r\x1b[31mred\x1b[0m"


def json_lines(text: str) -> list[dict[str, Any]]:
    rows = []
    for line in text.splitlines():
        row = json.loads(line)  # every line is one object: nothing else is written
        assert isinstance(row, dict), line
        rows.append(row)
    return rows


def test_worker_json_lines_name_the_job_worker_and_attempt(cli: Cli, tmp_path: Path) -> None:
    ok = cli.enqueue("add", {"a": 1, "b": 2})
    bad = cli.enqueue("explode", {"why": HOSTILE}, "--attempts", "1")
    done = cli.run("worker", APP, "--burst", "--log-format", "json")
    rows = json_lines(done.stderr)
    assert done.stdout == ""
    for row in rows:
        assert {"time", "level", "logger", "message"} <= set(row)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", row["time"])
    (completed,) = [row for row in rows if row.get("job_id") == ok]
    assert completed["level"] == "INFO"
    assert completed["logger"] == "conveyor.jobs"
    assert completed["task"] == "add"
    assert completed["attempt"] == 1
    assert len(completed["worker_id"]) > 0
    failures = [row for row in rows if row.get("job_id") == bad]
    assert [(row["level"], row["attempt"]) for row in failures] == [("ERROR", 1)]
    assert HOSTILE in failures[0]["message"]  # kept whole, inside a JSON string
    # Every line, the start banner's too, names the worker.
    assert {row.get("worker_id") for row in rows} == {completed["worker_id"]}


def test_text_lines_escape_what_a_job_put_in_its_exception(cli: Cli) -> None:
    cli.enqueue("explode", {"why": HOSTILE}, "--attempts", "1")
    done = cli.run("worker", APP, "--burst")
    text = done.stderr
    assert "\x1b" not in text
    assert "\r" not in text
    for line in text.splitlines():
        assert not line.startswith("2020-01-01"), line
    assert "first\\n2020-01-01 00:00:00,000 INFO" in text
    assert "\\x1b[31mred" in text
    (dead,) = [line for line in text.splitlines() if "dead-lettered" in line]
    assert dead.endswith("RuntimeError: first\\n" + FORGED + "\\r\\x1b[31mred\\x1b[0m")


def test_scheduler_and_serve_log_json(cli: Cli, tmp_path: Path) -> None:
    scheduler_log = tmp_path / "scheduler.log"
    serve_log = tmp_path / "serve.log"
    scheduler = cli.start(
        "scheduler", "apps.scheduled:app", "--log-format", "json", log=scheduler_log
    )
    server = cli.start("serve", APP, "--port", "0", "--log-format", "json", log=serve_log)
    wait_until(lambda: "serving on" in serve_log.read_text())
    wait_until(lambda: scheduler_log.read_text().strip())
    for proc in (scheduler, server):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    for log, logger in ((scheduler_log, "conveyor.scheduler"), (serve_log, "conveyor.server")):
        rows = json_lines(log.read_text())
        assert any(row["logger"].startswith(logger) for row in rows), rows

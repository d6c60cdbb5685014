"""``conveyor scheduler``, ``conveyor schedules ...`` and ``worker --with-scheduler``
as subprocesses on a temporary SQLite file."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor

from .conftest import Cli, wait_until

APP = "apps.scheduled:app"


def schedule_jobs(cli: Cli, name: str) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = cli.json("jobs", "list", "--limit", "1000")
    return [j for j in jobs if (j.get("metadata") or {}).get("schedule") == name]


@pytest.mark.slow
def test_scheduler_then_schedules_commands(cli: Cli, tmp_path: Path) -> None:
    scheduler = cli.start("scheduler", APP, log=tmp_path / "scheduler.log")
    wait_until(lambda: len(schedule_jobs(cli, "every-second")) >= 2)

    listed = {row["name"]: row for row in cli.json("schedules", "list")}
    assert set(listed) == {"every-second", "nightly"}
    nightly = listed["nightly"]
    assert (nightly["cron"], nightly["timezone"], nightly["paused"]) == (
        "30 2 * * *",
        "Europe/Berlin",
        False,
    )
    assert nightly["payload"] == {"report": "daily"}
    assert nightly["options"] == {"queue": "reports"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:00Z", nightly["next_fire_iso"])
    assert listed["every-second"]["fires"] >= 2

    table = cli.run("schedules", "list").stdout
    assert "nightly" in table
    assert "every-second" in table
    assert "Europe/Berlin" in table

    assert cli.run("schedules", "pause", "every-second").stdout.strip() == (
        "paused schedule every-second"
    )
    wait_until(lambda: cli.json("schedules", "list")[0]["paused"])
    time.sleep(1.5)  # a look in flight may finish its fire
    count = len(schedule_jobs(cli, "every-second"))
    time.sleep(2.0)
    assert len(schedule_jobs(cli, "every-second")) == count  # paused: nothing fires

    job_id = cli.run("schedules", "trigger", "nightly").stdout.strip()
    triggered = cli.job(job_id)
    assert triggered["queue"] == "reports"
    assert triggered["metadata"] == {"schedule": "nightly", "trigger": True}

    out = cli.run("schedules", "set-cron", "nightly", "0 4 * * *").stdout
    assert out.startswith("schedule nightly: 0 4 * * * (set-cron); next fire ")
    row = next(r for r in cli.json("schedules", "list") if r["name"] == "nightly")
    assert (row["cron"], row["declared_cron"], row["overridden"]) == (
        "0 4 * * *",
        "30 2 * * *",
        True,
    )
    out = cli.run("schedules", "set-cron", "nightly", "--every", "1h").stdout
    assert "every 1h00m (set-cron)" in out

    out = cli.run("schedules", "resume", "every-second").stdout
    assert out.startswith("resumed schedule every-second; next fire ")
    wait_until(lambda: len(schedule_jobs(cli, "every-second")) > count)

    scheduler.terminate()
    assert scheduler.wait(timeout=15) == 0
    log = (tmp_path / "scheduler.log").read_text()
    assert "scheduler started with 2 schedule(s)" in log
    assert "scheduler stopped" in log

    # Everything persisted: a new scheduler keeps the override.
    row = next(r for r in cli.json("schedules", "list") if r["name"] == "nightly")
    assert (row["cron"], row["every"]) == (None, 3600.0)


def test_schedules_errors_are_one_line(cli: Cli) -> None:
    assert cli.json("schedules", "list") == []
    assert "no schedules" in cli.run("schedules").stdout
    for args, message in [
        (("schedules", "pause", "nope"), "error: no schedule named 'nope'"),
        (("schedules", "trigger", "nope"), "error: no schedule named 'nope'"),
        (("schedules", "set-cron", "nope", "* * * * *"), "error: no schedule named 'nope'"),
        (("schedules", "set-cron", "nope"), "error: give a CRON expression or --every"),
    ]:
        done = cli.run(*args, ok=False)
        assert done.returncode in (1, 2), done
        assert done.stderr.startswith(message), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_set_cron_refuses_an_invalid_expression(cli: Cli) -> None:
    app = Conveyor(cli.url)
    app.schedule("nightly", cron="30 2 * * *", task="tick")

    async def store() -> None:
        async with app:
            await app.scheduler().sync()

    asyncio.run(store())
    done = cli.run("schedules", "set-cron", "nightly", "99 * * * *", ok=False)
    assert done.returncode == 2
    assert done.stderr.startswith("error: schedule 'nightly': invalid cron expression '99 * * * *'")
    done = cli.run("schedules", "set-cron", "nightly", "--every", "soon", ok=False)
    assert done.returncode == 2
    assert "not a duration: 'soon'" in done.stderr
    (row,) = cli.json("schedules", "list")
    assert (row["cron"], row["overridden"]) == ("30 2 * * *", False)  # nothing changed


@pytest.mark.slow
def test_worker_with_scheduler_fires_and_runs(cli: Cli, tmp_path: Path) -> None:
    worker = cli.start("worker", APP, "--with-scheduler", log=tmp_path / "worker.log")

    def completed() -> list[dict[str, Any]]:
        return [j for j in schedule_jobs(cli, "every-second") if j["state"] == "completed"]

    wait_until(lambda: len(completed()) >= 2)
    worker.terminate()
    assert worker.wait(timeout=20) == 0


@pytest.mark.slow
def test_worker_processes_with_scheduler_fire_once(cli: Cli, tmp_path: Path) -> None:
    worker = cli.start(
        "worker", APP, "--processes", "2", "--with-scheduler", log=tmp_path / "workers.log"
    )
    wait_until(lambda: len(schedule_jobs(cli, "every-second")) >= 3, timeout=30)
    worker.terminate()
    assert worker.wait(timeout=30) == 0
    keys = [j["idempotency_key"] for j in schedule_jobs(cli, "every-second")]
    assert len(keys) == len(set(keys))
    log = (tmp_path / "workers.log").read_text()
    assert log.count("scheduler started") == 1  # one scheduler, in the supervisor

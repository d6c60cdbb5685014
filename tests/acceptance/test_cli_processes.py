"""``worker --processes N`` (the supervisor) and ``conveyor demo``: real processes, seconds each."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import APP, Cli, clean_env, wait_until

pytestmark = pytest.mark.slow


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def live_pids(cli: Cli) -> set[int]:
    return {row["pid"] for row in cli.json("workers", "--app", APP) if row["alive"]}


def test_two_processes_drain_jobs_and_a_killed_child_is_restarted(cli: Cli, tmp_path: Path) -> None:
    job_ids = [cli.enqueue("sleep", {"seconds": 0.3}) for _ in range(12)]
    log = tmp_path / "supervisor.log"
    supervisor = cli.start("worker", APP, "--processes", "2", "-c", "2", log=log)

    def two_workers() -> set[int] | None:
        pids = live_pids(cli)
        return pids if len(pids) == 2 else None

    first = wait_until(two_workers)
    assert supervisor.pid not in first

    def all_done() -> list[dict[str, object]] | None:
        jobs: list[dict[str, object]] = cli.json("jobs", "list", "--task", "sleep")
        assert {job["id"] for job in jobs} == set(job_ids)
        return jobs if all(job["state"] == "completed" for job in jobs) else None

    jobs = wait_until(all_done, timeout=30)
    ran_in = {job["result"]["pid"] for job in jobs}
    assert ran_in == first  # both children took jobs

    victim = min(first)
    os.kill(victim, signal.SIGKILL)
    restarted = wait_until(lambda: live_pids(cli) - first - {victim}, timeout=30)
    (new_pid,) = restarted
    survivor = max(first)
    text = log.read_text()
    assert re.search(rf"\(pid {victim}\) was killed by SIGKILL.*restarting", text), text
    assert f"started (pid {new_pid})" in text

    late = cli.enqueue("add", {"a": 1, "b": 2})
    wait_until(lambda: cli.job(late)["state"] == "completed")

    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=30) == 0
    assert not alive(new_pid)
    assert not alive(survivor)
    text = log.read_text()
    assert "SIGTERM received" in text
    assert "Traceback" not in text
    # stopped children removed their heartbeats; only the SIGKILLed one is left, dead
    left = cli.json("workers", "--all", "--app", APP)
    assert [(row["pid"], row["alive"]) for row in left] == [(victim, False)]


def test_processes_with_burst_exit_once_drained(cli: Cli, tmp_path: Path) -> None:
    job_ids = [cli.enqueue("add", {"a": n, "b": n}) for n in range(6)]
    log = tmp_path / "burst.log"
    supervisor = cli.start(
        "worker", APP, "--processes", "2", "--burst", "--log-format", "json", log=log
    )
    assert supervisor.wait(timeout=60) == 0, log.read_text()
    results = {job["id"]: job["result"] for job in cli.json("jobs", "list")}
    assert [results[job_id] for job_id in job_ids] == [2 * n for n in range(6)]
    # Every line is one JSON object: the children got the format too.
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    messages = [row["message"] for row in rows]
    assert sum("finished its burst" in message for message in messages) == 2
    assert sum("loop uvloop" in message for message in messages) == 2  # the loop (auto)
    assert len([row for row in rows if row["logger"] == "conveyor.jobs"]) == 6
    assert len({row["worker_id"] for row in rows if "worker_id" in row}) == 2


def test_a_second_signal_kills_the_children(cli: Cli, tmp_path: Path) -> None:
    cli.enqueue("blocking", {"seconds": 30})  # a sync job that ignores cancellation
    log = tmp_path / "force.log"
    supervisor = cli.start("worker", APP, "--processes", "2", log=log)
    wait_until(lambda: any(row["active"] for row in cli.json("workers", "--app", APP)))
    pids = live_pids(cli)

    supervisor.send_signal(signal.SIGTERM)
    time.sleep(1)
    assert supervisor.poll() is None  # a child is still finishing the blocking job
    supervisor.send_signal(signal.SIGINT)
    assert supervisor.wait(timeout=15) == 1  # not a clean stop: children were killed
    assert not any(alive(pid) for pid in pids)
    assert "second signal: killing" in log.read_text()


def test_demo_runs_in_a_fresh_folder_and_leaves_its_database(tmp_path: Path) -> None:
    env = clean_env("memory://")  # the demo ignores CONVEYOR_URL: it has its own file
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "conveyor", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert took < 60
    assert (tmp_path / "conveyor-demo.db").is_file()
    out = done.stdout
    assert "Summary" in out
    assert "Dead letters (4)" in out
    assert "card declined for order #" in out
    assert "jobs/s" in out
    assert "conveyor dlq list --url sqlite:///./conveyor-demo.db" in out
    assert "Traceback" not in done.stderr
    assert len(out.splitlines()) < 80  # modest off a terminal: no live frames

    url = "sqlite:///./conveyor-demo.db"
    cli = Cli(url=url, cwd=tmp_path, env=env)
    dead = cli.json("dlq", "list", "--url", url)
    assert len(dead) == 4
    assert {job["task"] for job in dead} == {"demo.failing"}
    counts = {row["name"]: row["counts"] for row in cli.json("queues", "--url", url)}
    assert sum(c["completed"] for c in counts.values()) == 254
    assert not any(c["waiting"] or c["delayed"] or c["active"] for c in counts.values())

    again = subprocess.run(
        [sys.executable, "-m", "conveyor", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert again.returncode == 0
    assert len(cli.json("dlq", "list", "--url", url)) == 4  # recreated, not added to


def test_sigterm_releases_a_stuck_sync_job_and_exits_at_the_deadline(
    cli: Cli, tmp_path: Path
) -> None:
    job_id = cli.enqueue("blocking", {"seconds": 60})
    log = tmp_path / "worker.log"
    worker = cli.start("worker", APP, log=log)
    wait_until(lambda: cli.job(job_id)["state"] == "active")

    worker.send_signal(signal.SIGTERM)
    started = time.monotonic()
    assert worker.wait(timeout=30) == 0
    assert time.monotonic() - started < 5 + 5  # shutdown_timeout is 5 s in apps.basic
    job = cli.job(job_id)
    assert (job["state"], job["attempts"]) == ("waiting", 0)  # released, attempt given back
    assert "abandoned" in log.read_text()

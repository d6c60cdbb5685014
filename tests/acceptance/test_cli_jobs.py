"""enqueue, worker --burst, jobs, queues: the CLI against a SQLite file."""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
from pathlib import Path

import pytest

from .conftest import APP, Cli, wait_until


def test_enqueue_then_a_burst_worker_completes_the_job(cli: Cli) -> None:
    job_id = cli.enqueue("add", {"a": 2, "b": 3})
    assert cli.job(job_id)["state"] == "waiting"

    done = cli.run("worker", APP, "--burst")

    job = cli.job(job_id)
    assert job["state"] == "completed"
    assert job["result"] == 5
    assert job["attempts"] == 1
    assert "Traceback" not in done.stderr


def test_enqueue_options_are_stored_and_json_prints_the_job(cli: Cli) -> None:
    args = ["enqueue", "add", "--payload", '{"a": 1, "b": 1}', "--delay", "30s"]
    args += ["--priority", "7", "--tenant", "acme", "--queue", "q1", "--key", "k-1"]
    args += ["--attempts", "4"]
    job = cli.json(*args)
    assert job["state"] == "delayed"
    assert job["run_at"] > job["created_at"] + 25
    assert (job["priority"], job["tenant"], job["queue"]) == (7, "acme", "q1")
    assert (job["idempotency_key"], job["max_attempts"]) == ("k-1", 4)
    assert job["duplicate"] is False

    again = cli.json(*args)
    assert again["id"] == job["id"]
    assert again["duplicate"] is True


def test_enqueue_with_app_uses_the_task_defaults(cli: Cli) -> None:
    job = cli.json("enqueue", "mail.send", "--payload", '{"to": "a@b.c"}', "--app", APP)
    assert job["queue"] == "emails"
    plain = cli.json("enqueue", "mail.send", "--payload", '{"to": "a@b.c"}')
    assert plain["queue"] == "default"


@pytest.mark.slow
def test_jobs_list_is_a_json_array_and_filters_work(cli: Cli) -> None:
    first = cli.enqueue("add", {"a": 1, "b": 2}, "--tenant", "acme")
    second = cli.enqueue("add", {"a": 3, "b": 4}, "--tenant", "globex")
    mail = cli.enqueue("mail.send", {"to": "x@y.z"}, "--queue", "emails")
    later = cli.enqueue("add", {"a": 0, "b": 0}, "--delay", "1h")

    everything = cli.json("jobs", "list")
    assert isinstance(everything, list)
    assert {job["id"] for job in everything} == {first, second, mail, later}
    assert all(isinstance(job, dict) for job in everything)

    def ids(*args: str) -> set[str]:
        return {job["id"] for job in cli.json("jobs", "list", *args)}

    assert ids("--tenant", "acme") == {first}
    assert ids("--queue", "emails") == {mail}
    assert ids("--task", "add") == {first, second, later}
    assert ids("--state", "delayed") == {later}
    assert ids("--state", "waiting", "--state", "delayed") == {first, second, mail, later}
    assert ids("--state", "completed") == set()
    assert len(cli.json("jobs", "list", "--limit", "2")) == 2

    table = cli.run("jobs", "list", "--task", "add", "--limit", "2").stdout
    assert later in table  # newest first
    assert "showing 2 of 3 jobs" in table


def test_jobs_show_and_cancel(cli: Cli) -> None:
    job_id = cli.enqueue("add", {"a": 1, "b": 2}, "--delay", "1h")
    shown = cli.run("jobs", "show", job_id).stdout
    assert job_id in shown
    assert "delayed" in shown

    out = cli.run("jobs", "cancel", job_id).stdout
    assert "cancelled" in out
    assert cli.job(job_id)["state"] == "cancelled"

    done_id = cli.enqueue("add", {"a": 1, "b": 2})
    cli.run("worker", APP, "--burst")
    refused = cli.run("jobs", "cancel", done_id, ok=False)
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: ")
    assert "completed" in refused.stderr


@pytest.mark.slow
def test_dead_letter_list_show_retry_delete_purge(cli: Cli) -> None:
    failing = [
        cli.enqueue("explode", {"why": f"boom {n}"}, "--attempts", "1", "--tenant", tenant)
        for n, tenant in enumerate(["acme", "acme", "globex", "globex"])
    ]
    ok = cli.enqueue("add", {"a": 1, "b": 1})
    cli.run("worker", APP, "--burst")

    dead = cli.json("dlq", "list")
    assert {job["id"] for job in dead} == set(failing)
    assert ok not in {job["id"] for job in dead}
    assert all(job["state"] == "failed" and job["failure_reason"] == "error" for job in dead)
    assert {job["error"]["message"] for job in dead} == {f"boom {n}" for n in range(4)}
    assert {job["id"] for job in cli.json("dlq", "list", "--tenant", "globex")} == set(failing[2:])

    shown = cli.run("dlq", "show", failing[0]).stdout
    assert "RuntimeError: boom 0" in shown
    assert "Traceback" in shown  # the job's own traceback, on stdout
    not_dead = cli.run("dlq", "show", ok, ok=False)
    assert not_dead.returncode == 1
    assert "not in the dead-letter queue" in not_dead.stderr

    # retry through both spellings: a fresh job each, linked to the original
    new_ids = [
        cli.run("dlq", "retry", failing[0]).stdout.strip(),
        cli.run("jobs", "retry", failing[1]).stdout.strip(),
    ]
    for original, new_id in zip(failing[:2], new_ids, strict=True):
        fresh = cli.job(new_id)
        assert (fresh["state"], fresh["attempts"], fresh["retry_of"]) == ("waiting", 0, original)
        assert cli.job(original)["retried_as"] == new_id
    # a dead letter is retried once: again, through either spelling, gives the same job
    for command in ("dlq", "jobs"):
        again = cli.run(command, "retry", failing[0])
        assert again.stdout.strip() == new_ids[0]
        assert f"already retried as {new_ids[0]}" in again.stderr
    assert len(cli.json("jobs", "list", "--task", "explode")) == 6

    cli.run("dlq", "delete", failing[2])
    assert cli.run("jobs", "show", failing[2], ok=False).returncode == 1

    nothing = cli.run("dlq", "purge", "--older-than", "1h")
    assert "nothing to purge" in nothing.stdout

    declined = cli.run("dlq", "purge", "--tenant", "globex", input="n\n", ok=False)
    assert declined.returncode == 1
    assert "Delete 1 dead letter(s) (tenant=globex)?" in declined.stderr
    assert len(cli.json("dlq", "list")) == 3

    purged = cli.run("dlq", "purge", "--tenant", "globex", input="y\n")
    assert "purged 1 dead letter(s)" in purged.stdout
    assert "purged 2 dead letter(s)" in cli.run("dlq", "purge", "--yes").stdout
    assert cli.json("dlq", "list") == []


@pytest.mark.slow
def test_queues_pause_stops_claims_and_resume_lets_them_run(cli: Cli) -> None:
    job_id = cli.enqueue("add", {"a": 1, "b": 2})
    assert "paused queue 'default'" in cli.run("queues", "pause", "default").stdout

    rows = {row["name"]: row for row in cli.json("queues")}
    assert rows["default"]["paused"] is True
    assert rows["default"]["counts"]["waiting"] == 1
    assert set(rows["default"]) >= {"name", "paused", "max_size", "ttl", "counts"}
    assert "paused" in cli.run("queues").stdout

    cli.run("worker", APP, "--burst")
    assert cli.job(job_id)["state"] == "waiting"

    cli.run("queues", "resume", "default")
    assert {row["name"]: row for row in cli.json("queues")}["default"]["paused"] is False
    cli.run("worker", APP, "--burst")
    assert cli.job(job_id)["state"] == "completed"
    counts = {row["name"]: row for row in cli.json("queues")}["default"]["counts"]
    assert counts["completed"] == 1
    assert counts["waiting"] == 0


@pytest.mark.slow
def test_workers_lists_a_running_worker_and_sigterm_stops_it_cleanly(
    cli: Cli, tmp_path: Path
) -> None:
    assert cli.json("workers") == []
    proc = cli.start("worker", APP, "-q", "default,emails", "-c", "7", log=tmp_path / "w.log")

    def seen() -> list[dict[str, object]]:
        rows: list[dict[str, object]] = cli.json("workers", "--app", APP)
        return [row for row in rows if row["pid"] == proc.pid]

    (row,) = wait_until(seen)
    assert row["alive"] is True
    assert row["concurrency"] == 7
    assert row["queues"][:2] == ["default", "emails"]
    assert "ago" in cli.run("workers").stdout

    job_id = cli.enqueue("add", {"a": 20, "b": 22})
    wait_until(lambda: cli.job(job_id)["state"] == "completed")

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    log = (tmp_path / "w.log").read_text()
    assert "Traceback" not in log
    assert cli.json("workers", "--all") == []  # the heartbeat is removed at shutdown


BAD_INPUT = [
    (["enqueue", "add", "--payload", "{not json"], 2, "not valid JSON"),
    (["worker", "nosuch:app"], 2, "could not import module 'nosuch'"),
    (["worker", "apps.basic:missing"], 2, "has no attribute 'missing'"),
    (["worker", "apps.basic:not_an_app"], 2, "not a conveyor.Conveyor"),
    (["worker", "apps.basic"], 2, "module:attribute"),
    (["enqueue", "add", "--delay", "5x"], 2, "not a duration: '5x'"),
    (["enqueue", "nosuch.task", "-p", "{}", "--app", APP], 2, "no task named 'nosuch.task'"),
    (["enqueue", "add", "-p", "[1, 2]"], 2, "must be a JSON object"),
    (["enqueue", "add", "-p", "[1, 2]", "--app", APP], 2, "not a list"),
    (["enqueue", "add", "--priority", "urgent"], 2, "'urgent' is not an integer nor one of"),
    (["jobs", "list", "--url", "nosuch://x"], 2, "unknown backend scheme"),
    (["jobs", "list", "--url", "not-a-url"], 2, "url"),
    (["jobs", "show", "0123456789abcdef0123456789"], 1, "no job with id"),
    (["dlq", "retry", "0123456789abcdef0123456789"], 1, "no job with id"),
    (["jobs", "list", "--state", "lost"], 2, "'lost' is not one of"),
    (["schedules", "set-cron", "nightly", "* * *"], 2, "has 3 fields"),
    (["nosuchcommand"], 2, "No such command"),
]


@pytest.mark.parametrize(("args", "code", "message"), BAD_INPUT)
def test_bad_input_is_one_error_line_without_traceback(
    cli: Cli, args: list[str], code: int, message: str
) -> None:
    done = cli.run(*args, ok=False)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    assert message in lines[0]
    assert done.stdout == ""


def test_the_console_script_and_python_m_are_the_same_command(cli: Cli) -> None:
    script = shutil.which("conveyor", path=str(Path(sys.executable).parent))
    assert script is not None
    import subprocess

    via_script = subprocess.run(
        [script, "--help"], capture_output=True, text=True, check=True, env=cli.env
    )
    assert via_script.stdout == cli.run("--help").stdout
    assert "worker" in via_script.stdout


def test_json_lists_print_only_json(cli: Cli) -> None:
    cli.enqueue("add", {"a": 1, "b": 2})
    for args in (["jobs", "list"], ["dlq", "list"], ["queues"], ["workers", "--all"]):
        done = cli.run(*args, "--json")
        assert isinstance(json.loads(done.stdout), list), args
        assert done.stderr == ""


def test_url_works_on_the_group_and_on_the_subcommand(cli: Cli, tmp_path: Path) -> None:
    job_id = cli.enqueue("add", {"a": 1, "b": 2})
    cli.env.pop("CONVEYOR_URL")
    cli.cwd = tmp_path
    cli.run("migrate")  # the default ./conveyor.db, empty
    assert cli.json("jobs", "list") == []
    assert [job["id"] for job in cli.json("--url", cli.url, "jobs", "list")] == [job_id]
    assert [job["id"] for job in cli.json("jobs", "list", "--url", cli.url)] == [job_id]
    # the subcommand's --url wins over the group's
    assert cli.json("--url", "memory://", "jobs", "list", "--url", cli.url)[0]["id"] == job_id


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_the_worker_runs_on_the_loop_asked_for(cli: Cli, loop: str) -> None:
    job_id = cli.enqueue("add", {"a": 20, "b": 22})

    done = cli.run("worker", APP, "--burst", "--loop", loop, "--log-level", "info")

    assert f"loop {loop}" in done.stderr
    assert cli.job(job_id)["result"] == 42


def test_the_default_loop_is_uvloop_when_installed(cli: Cli) -> None:
    done = cli.run("worker", APP, "--burst", "--log-level", "info")
    assert "loop uvloop" in done.stderr


READS = [
    ["jobs", "list"],
    ["jobs", "show", "0123456789abcdef0123456789"],
    ["dlq", "list"],
    ["queues"],
    ["workers"],
    ["schedules", "list"],
]


@pytest.mark.parametrize("args", READS)
def test_a_read_of_a_missing_sqlite_file_is_an_error_and_creates_nothing(
    cli: Cli, tmp_path: Path, args: list[str]
) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "jobs.db"
    done = cli.run(*args, "--url", f"sqlite:///{missing}", ok=False)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: no database at {missing}")
    assert "--url" in line
    assert "CONVEYOR_URL" in line
    assert not (tmp_path / "no").exists()


def test_a_read_without_url_does_not_create_the_default_database(cli: Cli, tmp_path: Path) -> None:
    cli.env.pop("CONVEYOR_URL")
    cli.cwd = tmp_path
    done = cli.run("jobs", "list", ok=False)
    assert done.returncode == 1
    assert "no database at" in done.stderr
    assert not (tmp_path / "conveyor.db").exists()


def test_enqueue_takes_priority_names_and_integers(cli: Cli) -> None:
    for given, stored in [("high", 10), ("CRITICAL", 20), ("Low", -10), ("normal", 0), ("7", 7)]:
        job_id = cli.enqueue("add", {"a": 1, "b": 2}, "--priority", given)
        assert cli.job(job_id)["priority"] == stored, given


def test_enqueue_without_app_accepts_any_task_name(cli: Cli) -> None:
    job_id = cli.enqueue("elsewhere.task", {})
    assert cli.job(job_id)["task"] == "elsewhere.task"
    assert "--app" in cli.run("enqueue", "--help").stdout


def test_a_refused_enqueue_stores_nothing(cli: Cli) -> None:
    assert cli.run("enqueue", "nosuch.task", "--app", APP, ok=False).returncode == 2
    assert cli.run("enqueue", "add", "-p", "[1, 2]", ok=False).returncode == 2
    assert cli.json("jobs", "list") == []


BAD_SETTINGS = [
    ("CONVEYOR_LEASE", "abc", "lease (CONVEYOR_LEASE): not a duration: 'abc' (use seconds"),
    ("CONVEYOR_API_TOKENS", "notjson", "'notjson' is not JSON; expected a JSON object"),
    ("CONVEYOR_CONCURRENCY", "0", "concurrency (CONVEYOR_CONCURRENCY): '0': Input should be"),
]
COMMANDS = [["worker", APP], ["serve", APP], ["jobs", "list"], ["enqueue", "add"]]


@pytest.mark.parametrize(("name", "value", "message"), BAD_SETTINGS)
@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: args[0])
def test_an_invalid_setting_is_one_line_naming_it_and_exit_2(
    cli: Cli, name: str, value: str, message: str, args: list[str]
) -> None:
    cli.env[name] = value
    done = cli.run(*args, ok=False)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: invalid configuration: ")
    assert message in line


def without(module: str, *args: str) -> list[str]:
    """The CLI in a process where ``module`` cannot be imported (a missing extra)."""
    code = (
        f"import sys; sys.modules[{module!r}] = None; sys.argv[0] = 'conveyor'; "
        "from conveyor.cli.main import main; main()"
    )
    return [sys.executable, "-c", code, *args]


MISSING_EXTRAS = [
    ("uvloop", ["worker", APP, "--loop", "uvloop"], "pip install 'conveyor[uvloop]'"),
    ("uvicorn", ["serve", APP], "pip install 'conveyor[server]'"),
    ("asyncpg", ["jobs", "list", "--url", "postgresql://127.0.0.1/x"], "conveyor[postgres]"),
    ("redis", ["jobs", "list", "--url", "redis://127.0.0.1:1/0"], "conveyor[redis]"),
]


@pytest.mark.parametrize(
    ("module", "args", "hint"), MISSING_EXTRAS, ids=[extra[0] for extra in MISSING_EXTRAS]
)
def test_a_missing_extra_is_one_line_and_exit_3(
    cli: Cli, module: str, args: list[str], hint: str
) -> None:
    import subprocess

    done = subprocess.run(
        without(module, *args), cwd=cli.cwd, env=cli.env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 3, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: ")
    assert hint in line


def test_sigint_stops_the_worker_gracefully_with_exit_0(cli: Cli, tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    proc = cli.start("worker", APP, log=log)
    wait_until(lambda: "started" in log.read_text())
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=20) == 0, log.read_text()


def test_the_worker_lists_its_tasks_and_logs_each_completed_job(cli: Cli) -> None:
    job_id = cli.enqueue("add", {"a": 1, "b": 2})
    log = cli.run("worker", APP, "--burst").stderr
    assert "7 task(s):" in log
    assert re.search(r"mail\.send +queue emails, concurrency unlimited", log), log
    assert re.search(r"crm\.sync +queue default, concurrency unlimited, at most 1 per key", log)
    assert re.search(rf"INFO +conveyor\.jobs: add {job_id} completed \(attempt 1\) in \d", log)

    quiet_id = cli.enqueue("add", {"a": 1, "b": 2})
    quiet = cli.run("worker", APP, "--burst", "--quiet").stderr
    assert quiet_id not in quiet
    assert "burst done: 1 job(s) processed" in quiet


def test_the_last_line_after_sigterm_counts_finished_and_released_jobs(
    cli: Cli, tmp_path: Path
) -> None:
    done_id = cli.enqueue("add", {"a": 1, "b": 2})
    stuck_id = cli.enqueue("sleep", {"seconds": 60})
    log = tmp_path / "w.log"
    proc = cli.start("worker", APP, log=log)
    wait_until(lambda: cli.job(stuck_id)["state"] == "active")
    assert cli.job(done_id)["state"] == "completed"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    last = log.read_text().splitlines()[-1]
    assert re.search(r"worker \S+ stopped: 1 job\(s\) finished, 1 released back to waiting", last)


@pytest.mark.slow
def test_queues_show_running_jobs_per_concurrency_key(cli: Cli, tmp_path: Path) -> None:
    for _ in range(2):
        cli.enqueue("crm.sync", {"account": "a-1"}, "--app", APP)
    other = cli.enqueue("add", {"a": 1, "b": 2}, "--concurrency-key", "acct-9")
    assert cli.job(other)["concurrency_key"] == "acct-9"
    assert cli.json("queues", "keys") == []
    cli.start("worker", APP, "-c", "5", log=tmp_path / "worker.log")

    def one_running() -> list[dict[str, object]]:
        # Only crm.sync's rows: the uncapped "add" job may be running as well.
        keys: list[dict[str, object]] = cli.json("queues", "keys", "--app", APP)
        synced = [k for k in keys if k["task"] == "crm.sync"]
        return synced if synced and synced[0]["running"] == 1 else []

    (row,) = wait_until(one_running)
    assert row == {"task": "crm.sync", "key": "a-1", "running": 1, "waiting": 1, "cap": 1}
    shown = cli.run("queues", "--app", APP).stdout
    assert "jobs per concurrency key" in shown
    assert "a-1" in shown
    # The cap held: the second job of the key still waits while the first runs.
    waiting = [j for j in cli.json("jobs", "list", "--state", "waiting") if j["task"] == "crm.sync"]
    assert len(waiting) == 1


@pytest.mark.slow
def test_queues_rates_show_starts_per_rate_limit_key(cli: Cli, tmp_path: Path) -> None:
    for api in ("maps", "maps", "maps", "mail"):
        cli.enqueue("api.call", {"api": api}, "--app", APP)
    assert cli.json("queues", "rates", "--app", APP) == []
    assert "no rate-limit key has a start" in cli.run("queues", "rates", "--app", APP).stdout
    cli.start("worker", APP, "-c", "5", log=tmp_path / "worker.log")

    def both_started() -> list[dict[str, object]]:
        rates: list[dict[str, object]] = cli.json("queues", "rates", "--app", APP)
        return rates if sum(int(str(r["used"])) for r in rates) == 3 else []

    rates = wait_until(both_started)
    assert rates == [
        {"task": "api.call", "key": "maps", "used": 2, "limit": 2, "period": 60.0},
        {"task": "api.call", "key": "mail", "used": 1, "limit": 2, "period": 60.0},
    ]
    shown = cli.run("queues", "--app", APP).stdout
    assert "starts per rate-limit key" in shown
    assert "maps" in shown
    # maps' window is full: its third job waits for the window to slide.
    waiting = [j for j in cli.json("jobs", "list", "--state", "waiting") if j["task"] == "api.call"]
    assert len(waiting) == 1


def test_bad_flow_control_options_are_one_line(cli: Cli) -> None:
    result = cli.run("enqueue", "add", "--debounce", "5s", ok=False)
    assert result.returncode != 0
    assert "debounce needs an idempotency_key" in result.stderr
    assert "Traceback" not in result.stderr


def test_enqueue_takes_a_rate_limit_key(cli: Cli) -> None:
    job_id = cli.enqueue("add", {"a": 1, "b": 2}, "--rate-limit-key", "api-3")
    assert cli.job(job_id)["rate_limit_key"] == "api-3"
    # With --app the task is known: its rate limit is not per key, so the key is refused.
    result = cli.run("enqueue", "add", "--app", APP, "--rate-limit-key", "api-3", ok=False)
    assert result.returncode != 0
    assert "'add' has no rate_limit" in result.stderr
    assert "Traceback" not in result.stderr

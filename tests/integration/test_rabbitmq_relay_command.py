"""``conveyor relay``: the dispatch roles in a process of their own, with no
worker running. A real ``python -m conveyor relay`` process on SQLite and on
PostgreSQL publishes due jobs and fails a job whose worker queue's TTL ran
out through the broker's dead-letter path; it stops cleanly on SIGTERM. Bad
invocations fail with a clear message."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rabbitmq_fixtures import Place, amqp_url, place, sqlite_place

from conveyor import Conveyor
from conveyor.job import JobState

__all__ = ["amqp_url", "place", "sqlite_place"]  # fixtures

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]
TTL = 1.0


def env_for(where: Place) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["CONVEYOR_WORKER_QUEUE_TTL"] = str(TTL)
    env.pop("CONVEYOR_DISPATCH", None)
    return env


def relay_cmd(where: Place, *extra: str) -> list[str]:
    return [sys.executable, "-m", "conveyor", "relay", "--url", where.url, *extra]


@pytest.fixture(params=["sqlite", "postgres"])
def any_place(request: pytest.FixtureRequest) -> Place:
    where: Place = request.getfixturevalue(
        "place" if request.param == "postgres" else "sqlite_place"
    )
    return where


@pytest.fixture
def relay(any_place: Place, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    log = (tmp_path / "relay.log").open("wb")
    process = subprocess.Popen(
        relay_cmd(any_place, "--dispatch", any_place.dispatch()),
        env=env_for(any_place),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    log.close()
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def wait_until(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_relay_process_publishes_and_handles_dead_letters_without_workers(
    any_place: Place, relay: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    place = any_place
    place.queues.update({"default", "worker.gone"})
    app = Conveyor(place.url, worker_queue_ttl=TTL)
    try:
        waiting = await app.enqueue("work", {"n": 1})
        lost = await app.enqueue("work", {"n": 2}, worker="gone")

        async def published() -> bool:
            try:
                return await place.message_count("default") == 1
            except Exception:  # not declared by the relay yet
                return False

        await wait_until(published, 30, "the relay to publish the waiting job")
        failed = await app.wait_for_job(lost.id, timeout=30)
        assert failed.state is JobState.FAILED
        assert failed.failure_reason is not None
        assert failed.failure_reason.value == "expired"
        assert failed.error is not None
        assert "dead-lettered by the broker" in failed.error.message
        # No worker ran: the waiting job is only published, still waiting.
        still = await app.get_job(waiting.id)
        assert still is not None
        assert still.state is JobState.WAITING
    finally:
        await app.close()
    relay.send_signal(signal.SIGTERM)
    assert relay.wait(30) == 0, (tmp_path / "relay.log").read_text()
    assert "relay started: relay, reconciler, dead_letters" in (tmp_path / "relay.log").read_text()


def test_relay_without_a_dispatch_url_fails_clearly(sqlite_place: Place) -> None:
    done = subprocess.run(
        relay_cmd(sqlite_place), env=env_for(sqlite_place), capture_output=True, timeout=60
    )
    assert done.returncode == 2
    assert b"conveyor relay needs --dispatch" in done.stderr


def test_relay_on_a_store_without_dispatch_records_fails_clearly(sqlite_place: Place) -> None:
    where = Place("", "", sqlite_place.amqp_url, sqlite_place.prefix, store_url="memory://")
    done = subprocess.run(
        relay_cmd(where, "--dispatch", sqlite_place.dispatch()),
        env=env_for(where),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert b"dispatch needs a SQL store (PostgreSQL or SQLite)" in done.stderr


def test_relay_refuses_an_unknown_role(sqlite_place: Place) -> None:
    done = subprocess.run(
        relay_cmd(sqlite_place, "--dispatch", sqlite_place.dispatch(), "--roles", "relay,promote"),
        env=env_for(sqlite_place),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert b"promote: choose from relay, reconciler, dead_letters" in done.stderr


def test_relay_logs_json_lines(sqlite_place: Place, tmp_path: Path) -> None:
    log_path = tmp_path / "relay.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            relay_cmd(sqlite_place, "--dispatch", sqlite_place.dispatch(), "--log-format", "json"),
            env=env_for(sqlite_place),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 30
        while "relay started" not in log_path.read_text():
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    rows = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert rows
    for row in rows:
        assert {"time", "level", "logger", "message"} <= set(row)
    (started,) = [row for row in rows if row["message"].startswith("relay started")]
    assert started["logger"] == "conveyor.dispatch"

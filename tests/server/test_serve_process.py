"""``conveyor serve`` as a real process: it binds a free port and answers; it
refuses a non-loopback address without a token; and a schemathesis run against
its OpenAPI document finds no server error."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .conftest import ADMIN, READ, TOKENS, auth

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
APP = "apps.metered:app"
#: Examples per operation and mode: ~30 operations x 2 modes, some 600 requests in all.
EXAMPLES_PER_OPERATION = 10


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def env_for(url: str, tokens: dict[str, list[str]] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env["CONVEYOR_URL"] = url
    if tokens is not None:
        env["CONVEYOR_API_TOKENS"] = json.dumps(tokens)
    return env


def serve_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "conveyor", "serve", APP, *args]


def start_server(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    """A ``conveyor serve`` process on a free port, answering: it, its base URL, its log."""
    port = free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            serve_command("--port", str(port), "--log-level", "warning"),
            cwd=HERE,
            env=env_for(f"sqlite:///{tmp_path / 'jobs.db'}", TOKENS),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(f"{base}/health/startup").status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert proc.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, "conveyor serve did not start in 20 s"
        time.sleep(0.05)
    return proc, base, log_path


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """A ``conveyor serve`` process on a free port; its base URL."""
    proc, base, log_path = start_server(tmp_path)
    try:
        yield base
    finally:
        proc.terminate()
        code = proc.wait(timeout=10)
    text = log_path.read_text()
    assert code == 0, text  # a graceful stop after SIGTERM, as the worker's
    assert "Traceback" not in text, text


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_serve_gracefully_with_exit_0(tmp_path: Path, sig: signal.Signals) -> None:
    proc, _, log_path = start_server(tmp_path)
    proc.send_signal(sig)
    assert proc.wait(timeout=10) == 0, log_path.read_text()


def test_a_port_in_use_is_one_error_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            serve_command("--port", str(port)),
            cwd=HERE,
            env=env_for(f"sqlite:///{tmp_path / 'jobs.db'}", TOKENS),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"error: cannot listen on 127.0.0.1:{port}: the port is already in use"
    ]


def test_serve_binds_a_free_port_and_answers(server: str) -> None:
    live = httpx.get(f"{server}/health/live")
    assert live.status_code == 200
    assert live.json() == {"status": "alive"}
    assert httpx.get(f"{server}/api/v1/jobs").status_code == 401
    created = httpx.post(
        f"{server}/api/v1/jobs",
        json={"task": "nap", "payload": {"seconds": 0}},
        headers=auth(ADMIN),
    )
    assert created.status_code == 201
    got = httpx.get(f"{server}/api/v1/jobs/{created.json()['id']}", headers=auth(READ))
    assert got.json()["state"] == "waiting"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "example.com"])
def test_refuses_to_bind_a_public_address_without_a_token(tmp_path: Path, host: str) -> None:
    done = subprocess.run(
        serve_command("--host", host, "--port", str(free_port())),
        cwd=HERE,
        env=env_for(f"sqlite:///{tmp_path / 'jobs.db'}", None),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert f"refusing to bind {host}" in done.stderr
    assert "CONVEYOR_API_TOKENS" in done.stderr


def test_schemathesis_finds_no_server_error(server: str) -> None:
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis.checks import not_a_server_error

    schema = schemathesis.openapi.from_url(f"{server}/api/v1/openapi.json")
    tested = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in schemathesis.GenerationMode:  # valid input, then invalid input

            @settings(
                max_examples=EXAMPLES_PER_OPERATION,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def check(case: schemathesis.Case) -> None:
                case.call_and_validate(
                    base_url=server, headers=auth(ADMIN), checks=[not_a_server_error]
                )

            try:
                check()
            except Unsatisfiable:
                # No parameter and no body: there is no invalid input to make.
                assert mode is schemathesis.GenerationMode.NEGATIVE, operation.label
                continue
            tested += 1
    assert tested >= 40

"""``conveyor worker --metrics-port``: a real scrape while the worker runs, one
process and ``--processes 2`` behind one port."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import httpx
import pytest

from support.metrics import sample

from .conftest import APP, Cli, wait_until

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def scrape(port: int) -> str:
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    except httpx.TransportError:
        return ""
    assert response.status_code == 200
    return response.text


def test_one_worker_serves_its_job_counts_durations_and_loop_lag(cli: Cli, tmp_path: Path) -> None:
    for n in range(3):
        cli.enqueue("add", {"a": n, "b": n})
    cli.enqueue("explode", {"why": "no"}, "--attempts", "1")
    port = free_port()
    # A short lease renews every second: the long job below sees renewals.
    cli.env["CONVEYOR_LEASE"] = "3s"
    worker = cli.start("worker", APP, "--metrics-port", str(port), log=tmp_path / "w.log")

    def counted() -> str | None:
        # Both counts: the four jobs end in any order (CI once scraped between
        # the third add and the failure).
        text = scrape(port)
        done = sample(text, "conveyor_worker_jobs_total", task="add", outcome="completed")
        failed = sample(text, "conveyor_worker_jobs_total", task="explode", outcome="failed")
        return text if (done, failed) == (3, 1) else None

    text = wait_until(counted)
    assert (
        sample(text, "conveyor_worker_job_duration_seconds_count", task="add", outcome="completed")
        == 3
    )
    assert sample(text, "conveyor_worker_jobs_running") == 0
    lag = wait_until(lambda: sample(scrape(port), "conveyor_worker_event_loop_lag_seconds"))
    assert 0 < lag < 1

    # The store's round trips: claims and settles timed, each of the above ones settled.
    assert (sample(text, "conveyor_worker_claim_seconds_count") or 0) >= 1
    assert (sample(text, "conveyor_worker_settle_seconds_count") or 0) >= 1
    assert sample(text, "conveyor_worker_settle_seconds_bucket", le="+Inf") == sample(
        text, "conveyor_worker_settle_seconds_count"
    )

    cli.enqueue("sleep", {"seconds": 4})
    assert wait_until(lambda: sample(scrape(port), "conveyor_worker_jobs_running") == 1)

    def renewed() -> str | None:
        text = scrape(port)
        count = sample(text, "conveyor_worker_lease_renewals_total", result="renewed")
        return text if count else None

    text = wait_until(renewed)
    assert sample(text, "conveyor_worker_lease_renewal_failures_total") == 0
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0


def test_two_processes_are_summed_behind_the_supervisors_port(cli: Cli, tmp_path: Path) -> None:
    for _ in range(8):
        cli.enqueue("sleep", {"seconds": 0.2})
    port = free_port()
    supervisor = cli.start(
        "worker",
        APP,
        "--processes",
        "2",
        "-c",
        "2",
        "--prefetch",
        "0",
        "--metrics-port",
        str(port),
        log=tmp_path / "s.log",
    )

    def all_counted() -> str | None:
        text = scrape(port)
        done = sample(text, "conveyor_worker_jobs_total", task="sleep", outcome="completed")
        return text if done == 8 else None

    text = wait_until(all_counted, timeout=30)
    jobs = cli.json("jobs", "list", "--task", "sleep")
    assert len({job["result"]["pid"] for job in jobs}) == 2  # both children counted
    # The gauges: one series each for the live children (running summed, lag the largest).
    assert sample(text, "conveyor_worker_jobs_running") is not None
    lag = wait_until(lambda: sample(scrape(port), "conveyor_worker_event_loop_lag_seconds"))
    assert 0 < lag < 1
    assert wait_until(lambda: sample(scrape(port), "conveyor_worker_jobs_running") == 0)
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=30) == 0
    assert "Traceback" not in (tmp_path / "s.log").read_text()


def test_a_metrics_port_in_use_is_one_clear_error(cli: Cli) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli.run("worker", APP, "--burst", "--metrics-port", str(port), ok=False)
    assert done.returncode != 0
    assert f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_only_get_metrics_is_answered(cli: Cli, tmp_path: Path) -> None:
    port = free_port()
    worker = cli.start("worker", APP, "--metrics-port", str(port), log=tmp_path / "w.log")
    assert wait_until(lambda: scrape(port))
    assert httpx.get(f"http://127.0.0.1:{port}/nothing", timeout=5).status_code == 404
    assert httpx.post(f"http://127.0.0.1:{port}/metrics", timeout=5).status_code == 404
    with socket.create_connection(("127.0.0.1", port), timeout=5) as idle:
        # A connection that never sends its request does not stop others being answered.
        assert "conveyor_worker_jobs_running" in scrape(port)
        idle.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert idle.recv(100).startswith(b"HTTP/1.1 200 OK")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0

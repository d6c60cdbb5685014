"""The server stops (``pg_ctl stop -m immediate``, a crash as far as clients
can tell) and comes back while producer and worker processes run: no
acknowledged enqueue is lost, producers meet typed errors and never hang, and
the same worker process carries on without a restart.

This test starts its own PostgreSQL (initdb + pg_ctl on a free port, in a temp
dir) and stops it: the shared server is never touched.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from chaos_helpers import Cluster
from postgres_servers import OwnServer

from conveyor.backends.base import JobFilter
from conveyor.backends.postgres import PostgresBackend
from conveyor.job import JobState

pytestmark = pytest.mark.slow

#: A producer process: enqueue one job at a time until --count acknowledged,
#: retrying through errors. Writes "ok <id>" per acknowledged job and
#: "err <type> <seconds>" per failed call, so the test sees what callers met.
PRODUCER = """
import asyncio, sys, time
from conveyor.app import Conveyor
from conveyor.errors import ConveyorError

async def main(out, count):
    app = Conveyor()
    done = 0
    with open(out, "a") as f:
        while done < count:
            started = time.monotonic()
            try:
                job = await app.enqueue("chaos.sleep", {"n": done})
            except ConveyorError as exc:
                f.write(f"err {type(exc).__name__} {time.monotonic() - started:.3f}\\n")
                f.flush()
                await asyncio.sleep(0.05)
                continue
            f.write(f"ok {job.id} {time.monotonic() - started:.3f}\\n")
            f.flush()
            done += 1
            await asyncio.sleep(0.005)
    await app.close()

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


@pytest.fixture
def server() -> Iterator[OwnServer]:
    own = OwnServer()
    try:
        own.init()
        own.start()
        yield own
    finally:
        own.destroy()


@pytest.fixture
async def cluster(tmp_path: Path, server: OwnServer) -> AsyncIterator[Cluster]:
    pg = Cluster(tmp_path)
    # Short timeouts so an outage shows within seconds.
    pg.url = f"{server.url}?schema=conveyor&connect_timeout=2&command_timeout=5"
    async with pg:
        yield pg


def _acks(path: Path) -> tuple[list[str], list[tuple[str, float]], float]:
    """(acknowledged ids, errors as (type, seconds), slowest call in seconds)."""
    ok: list[str] = []
    errors: list[tuple[str, float]] = []
    slowest = 0.0
    if not path.exists():
        return ok, errors, slowest
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue  # a line being written
        slowest = max(slowest, float(parts[2]))
        if parts[0] == "ok":
            ok.append(parts[1])
        else:
            errors.append((parts[1], float(parts[2])))
    return ok, errors, slowest


async def test_server_restart_loses_no_acknowledged_job(
    cluster: Cluster, server: OwnServer
) -> None:
    app = await cluster.app()  # migrates before anyone else connects
    worker = cluster.start_worker(10, env={"CONVEYOR_LEASE": "30s"})
    outs = [cluster.dir / f"producer-{i}.txt" for i in range(2)]
    producers = [
        cluster.spawn("producer", [sys.executable, "-c", PRODUCER, str(out), "400"]) for out in outs
    ]

    def acked() -> int:
        for producer in producers:
            assert producer.alive or producer.popen.returncode == 0, producer.tail()
        return sum(len(_acks(out)[0]) for out in outs)

    await cluster.wait_until(lambda: acked() >= 100, 60, "producers did not start")
    await app.close()  # the test's own pool must not hide anything
    listening = PostgresBackend(cluster.url)
    await listening.open()
    await listening.wait_for_work(["elsewhere"], 0)  # LISTENs from here on
    server.stop_immediate()
    down_at = time.monotonic()
    await asyncio.sleep(2.0)  # producers and the worker meet a dead server
    server.start()
    outage = time.monotonic() - down_at

    await asyncio.gather(*(p.wait_exit(120, "(producing through the restart)") for p in producers))
    for producer in producers:
        assert producer.popen.returncode == 0, producer.tail()

    ids: list[str] = []
    errors: list[tuple[str, float]] = []
    slowest = 0.0
    for out in outs:
        ok, failed, slow = _acks(out)
        ids += ok
        errors += failed
        slowest = max(slowest, slow)
    assert len(ids) == 800
    assert errors, "the producers never noticed the outage"
    assert {kind for kind, _ in errors} <= {"BackendUnavailable"}, errors
    # Never a hang: every call returned within the command/connect timeouts.
    assert slowest < 10.0, f"a call took {slowest:.1f}s (outage {outage:.1f}s)"

    cluster._app = None
    app = await cluster.app()
    completed = JobFilter(states=[JobState.COMPLETED])

    async def all_done() -> bool:
        found = await app.backend.get_jobs(ids)
        return len(found) == len(ids) and all(j.state is JobState.COMPLETED for j in found)

    await cluster.wait_until(all_done, 90, lambda: f"jobs not completed: {json.dumps(ids[:3])}")
    assert worker.alive, "the worker process died instead of reconnecting\n" + worker.tail()
    # A call that raised may still have committed (the server died between the
    # commit and the reply): never more extra jobs than failed calls.
    stored = await app.backend.count_jobs(completed)
    assert len(ids) <= stored <= len(ids) + len(errors)
    ran = {run.job_id for run in cluster.runs() if run.pid == worker.pid}
    assert set(ids) <= ran, "the worker that lived through the restart ran every job"

    # The listening connection came back by itself: a notification wakes a
    # waiter at once again (the timeout would be the polling fallback).
    try:
        await cluster.wait_until(lambda: listening._listener.connected, 30, "LISTEN never resumed")
        waiter = asyncio.create_task(listening.wait_for_work(["elsewhere"], 20))
        await asyncio.sleep(0.1)
        started = time.monotonic()
        await app.enqueue("chaos.sleep", {}, queue="elsewhere")
        await asyncio.wait_for(waiter, 20)
        assert time.monotonic() - started < 2.0
    finally:
        await listening.close()

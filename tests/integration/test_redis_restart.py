"""The Redis server is SIGKILLed and restarted under producers and a worker.

An own ``redis-server`` (free port, temp dir, ``appendonly yes`` +
``appendfsync always``) serves producer processes and a worker process. The
server is killed and started again on the same port and directory. Then:

- every enqueue a producer saw acknowledged is there and completes (G1);
- the worker process, never restarted, drains the jobs enqueued after;
- meanwhile callers got :class:`BackendUnavailable`, never another error or a hang.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

import pytest
from chaos_helpers import FAST, SHORT_LEASE, Cluster, get_jobs
from redis_servers import RedisServer

from conveyor.app import Conveyor
from conveyor.backends.base import JobFilter
from conveyor.job import JobState

pytestmark = pytest.mark.slow

#: Enqueues jobs one by one until --seconds passed, retrying every failed call;
#: writes "ok <id>" per acknowledged job and "err <ErrorType>" per failed call.
PRODUCER = """
import asyncio, sys, time
from conveyor.app import Conveyor

async def main(out, seconds):
    app = Conveyor()
    deadline = time.monotonic() + seconds
    n = 0
    with open(out, "a") as f:
        while time.monotonic() < deadline:
            try:
                if n % 10 == 9:
                    jobs = await app.enqueue_many([("chaos.sleep", {"n": n}, None)] * 5)
                else:
                    jobs = [await app.enqueue("chaos.sleep", {"n": n})]
                f.write("".join(f"ok {job.id}\\n" for job in jobs))
            except Exception as exc:
                f.write(f"err {type(exc).__name__}\\n")
                await asyncio.sleep(0.05)
            f.flush()
            n += 1
            await asyncio.sleep(0.002)
    await app.close()

asyncio.run(main(sys.argv[1], float(sys.argv[2])))
"""


async def test_acknowledged_enqueues_survive_a_server_kill(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", ["--appendonly", "yes", "--appendfsync", "always"])
    server.start()
    url = server.url("restart")
    try:
        (tmp_path / "world").mkdir()
        async with Cluster(tmp_path / "world") as world:
            world.url = url
            # Short lease: a claim whose reply the kill cut off is recovered in time.
            env = {**FAST, **SHORT_LEASE, "CONVEYOR_URL": url}
            worker = world.start_worker(8, env=env)
            app: Conveyor = await world.app()
            warmup = await app.enqueue_many([("chaos.sleep", {"n": -1})] * 20)
            done = JobFilter(states=[JobState.COMPLETED])

            async def worker_running() -> bool:
                # Kill the server only once the worker is up and working: a
                # worker that cannot reach its backend at start-up exits.
                return await app.backend.count_jobs(done) >= len(warmup)

            await world.wait_until(worker_running, 60, "the worker completed its first jobs")
            outs = [tmp_path / f"producer{i}.txt" for i in range(2)]
            producers = [
                world.spawn("producer", [sys.executable, "-c", PRODUCER, str(out), "6"], env=env)
                for out in outs
            ]

            def producing() -> bool:
                return all(out.exists() and out.read_text().count("ok ") >= 20 for out in outs)

            await world.wait_until(producing, 60, "both producers had enqueues acknowledged")
            server.kill()
            killed_at = time.monotonic()
            await asyncio.sleep(0.8)
            server.start()
            restarted_in = time.monotonic() - killed_at
            for producer in producers:
                assert await producer.wait_exit(30, "(producer)") == 0, producer.tail()

            acked: list[str] = []
            errors: list[str] = []
            for out in outs:
                for line in out.read_text().splitlines():
                    kind, _, rest = line.partition(" ")
                    (acked if kind == "ok" else errors).append(rest)
            assert len(acked) > 100
            assert errors, "the producers never noticed the outage"
            assert set(errors) == {"BackendUnavailable"}, set(errors)

            async def all_completed() -> bool:
                jobs = await get_jobs(app, acked)
                return len(jobs) == len(acked) and all(
                    j.state is JobState.COMPLETED for j in jobs.values()
                )

            await world.wait_until(all_completed, 60, "every acknowledged job completed")
            assert worker.alive, worker.tail()
            runs = world.run_counts()
            assert set(acked) <= set(runs)
            worker.signal(signal.SIGTERM)
            assert await worker.wait_exit(30, "(worker after SIGTERM)") == 0, worker.tail()
            assert "BackendUnavailable" in worker.err() or "claim failed" in worker.err()
            print(
                f"\nredis restart: {len(acked)} acknowledged enqueues, {len(errors)} failed "
                f"calls (all BackendUnavailable), server back after {restarted_in:.2f}s"
            )
    finally:
        server.kill()

"""G6 with real processes: three ``conveyor scheduler`` processes on one store
fire an every-second schedule; one is SIGKILLed and later restarted.

On SQLite the run lasts 60 s (20 s with three schedulers, 10 s with two, 30 s
after the restart). PostgreSQL and Redis run the same phases in 24 s (8 + 4 +
12): what is under test is what happens around the kill and the restart (a
scheduler dying between its enqueue and its compare-and-set, a new one syncing
beside two live ones), and the shorter run keeps every phase.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from conveyor import Conveyor
from support.kits import KITS

ACCEPTANCE = Path(__file__).resolve().parents[1] / "acceptance"
APP = "apps.scheduled:app"
SCHEDULE = "every-second"


def start_scheduler(url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env["CONVEYOR_URL"] = url
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "conveyor", "scheduler", APP],
            cwd=ACCEPTANCE,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


async def fired_slots(url: str) -> tuple[list[float], int, int]:
    """The slot of every job the schedule enqueued, how many jobs, and the stored fire count."""
    app = Conveyor(url)
    async with app:
        jobs = [
            job
            for job in await app.list_jobs(limit=100_000)
            if job.metadata and job.metadata.get("schedule") == SCHEDULE
        ]
        record = await app.schedules.get(SCHEDULE)
    slots = []
    for job in jobs:
        assert job.idempotency_key is not None
        text = job.idempotency_key.removeprefix(f"schedule:{SCHEDULE}:")
        slots.append(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())
    return sorted(slots), len(jobs), record.fires


#: Seconds with three schedulers, with two (one killed), and after the restart.
PHASES = {"sqlite": (20, 10, 30), "postgres": (8, 4, 12), "redis": (8, 4, 12)}


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", list(PHASES))
def test_three_schedulers_one_killed_fire_every_slot_exactly_once(
    tmp_path: Path, backend: str
) -> None:
    kit = KITS[backend](tmp_path)  # a server backend fails under CI when its server is missing
    url = kit.shared_url()
    three, two, after = PHASES[backend]
    logs = [tmp_path / f"scheduler-{i}.log" for i in range(3)]
    procs = [start_scheduler(url, log) for log in logs]
    try:
        began = time.time()
        time.sleep(three)
        victim = procs[1]
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(timeout=10)
        killed_at = time.time()
        time.sleep(two)
        procs[1] = start_scheduler(url, logs[1])
        time.sleep(after)
        ended = time.time()
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        codes = [proc.wait(timeout=20) for proc in procs]

    assert codes == [0, 0, 0], [log.read_text()[-2000:] for log in logs]
    try:
        slots, jobs, fires = asyncio.run(fired_slots(url))
    finally:
        asyncio.run(kit.cleanup())
    duplicates = [slot for slot, n in Counter(slots).items() if n > 1]
    assert not duplicates, f"slots fired twice: {duplicates}"
    gaps = [(a, b) for a, b in itertools.pairwise(slots) if b - a != 1.0]
    assert not gaps, f"missed slots between {gaps}"
    assert fires == jobs == len(slots)  # each slot advanced exactly once
    # The sequence covers the whole run, across the kill.
    assert slots[0] <= began + 6  # the first scheduler's start (imports, migrations)
    assert slots[-1] >= ended - 3
    assert any(killed_at - 1 <= s <= killed_at + 4 for s in slots)
    started = sum(log.read_text().count("scheduler started") for log in logs)
    assert started == 4  # three, and the restarted one

"""Flow control with real worker processes on every store: a per-key cap that
holds across four workers while one is SIGKILLed (checked from the handlers'
own records), and a debounce storm from four producer processes."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from chaos_apps.recorder import Run
from chaos_helpers import CHAOS_STORES, Cluster, Proc, get_jobs, long_run, report

from conveyor.app import Conveyor
from conveyor.job import JobState

pytestmark = pytest.mark.slow

KEYS = 10
CAP = 2
#: Long enough that a loaded host never loses a live lease (a lost lease would let
#: a second run start while the first is still stopping); short enough to
#: recover the killed worker's jobs within seconds.
KEYED_WORKER = {"CONVEYOR_LEASE": "3s", "CONVEYOR_MAX_STALLED": "1000"}
DEBOUNCER = "tests.integration.chaos_apps.debouncer"


def peak_per_key(
    runs: list[Run], keys_of: dict[str, str], gone: dict[int, float]
) -> dict[str, int]:
    """Most handlers running at once per key. A run the SIGKILL cut short
    (no end) ended when its process was killed (``gone``: pid -> time)."""
    events: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for run in runs:
        end = run.ended if run.ended is not None else gone.get(run.pid)
        assert end is not None, f"run of {run.job_id} by live pid {run.pid} never ended"
        key = keys_of[run.job_id]
        events[key] += [(run.started, 1), (end, -1)]
    peaks: dict[str, int] = {}
    for key, moments in events.items():
        running = peak = 0
        for _, step in sorted(moments):  # an end sorts before a start at the same time
            running += step
            peak = max(peak, running)
        peaks[key] = peak
    return peaks


async def busiest_worker(
    cluster: Cluster, app: Conveyor, workers: list[Proc]
) -> tuple[Proc, set[str]]:
    """The worker process holding the most active jobs right now, and their ids
    (a key-capped worker may hold none at a given moment: pick one that does)."""
    pids = {proc.pid: proc for proc in workers}
    for _ in range(200):
        worker_pid = {run.worker_id: run.pid for run in cluster.runs() if run.pid in pids}
        held: dict[int, set[str]] = defaultdict(set)
        for job in await app.list_jobs(JobState.ACTIVE, limit=1000):
            if job.worker_id in worker_pid:
                held[worker_pid[job.worker_id]].add(job.id)
        if held:
            pid = max(held, key=lambda p: len(held[p]))
            return pids[pid], held[pid]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no worker held an active job\n{cluster.tails()}")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("store", CHAOS_STORES)
async def test_key_cap_holds_across_processes_and_a_kill(tmp_path: Path, store: str) -> None:
    total = 4_000 if long_run() else 2_000
    async with Cluster(tmp_path, store) as cluster:
        app = await cluster.app()
        items = [
            ("chaos.keyed", {"key": f"key-{i % KEYS}", "seconds": 0.02}, {"attempts": 1000})
            for i in range(total)
        ]
        jobs = []
        for start in range(0, total, 500):
            jobs += await app.enqueue_many(items[start : start + 500])
        keys_of = {job.id: job.concurrency_key or "" for job in jobs}
        assert set(keys_of.values()) == {f"key-{k}" for k in range(KEYS)}
        workers = [cluster.start_worker(10, env=KEYED_WORKER) for _ in range(4)]

        async def some_done() -> bool:
            return await app.count_jobs(JobState.COMPLETED) >= total // 5

        await cluster.wait_until(some_done, 120, "the workers completed nothing")
        victim, held_before = await busiest_worker(cluster, app, workers)
        os.killpg(victim.pid, signal.SIGKILL)
        assert victim.popen.wait(10) == -signal.SIGKILL
        gone = {victim.pid: time.time()}

        async def drained() -> bool:
            return await app.count_jobs(JobState.COMPLETED) == total

        await cluster.wait_until(drained, 180, "not every job completed after the kill", 0.25)
        stored = await get_jobs(app, [job.id for job in jobs])
        runs = [run for run in cluster.runs() if run.task == "chaos.keyed"]
        peaks = peak_per_key(runs, keys_of, gone)
        over = {key: peak for key, peak in peaks.items() if peak > CAP}
        report(
            f"per-key cap ({KEYS} keys x {CAP}), 4 workers, one SIGKILLed",
            store,
            jobs=total,
            faults=1,
            lost=total - sum(1 for j in stored.values() if j.state is JobState.COMPLETED),
            duplicated=len(runs) - total,
            bound=len(held_before),
            passed=not over and len(stored) == total,
            note=f"peak per key {max(peaks.values())} (cap {CAP})",
        )
        assert not over, f"keys ran more than {CAP} at once: {over}"
        assert max(peaks.values()) == CAP, f"the cap was never reached: {peaks}"
        # The victim's jobs held their keys' slots until recovery, then ran to the end.
        assert all(stored[job_id].state is JobState.COMPLETED for job_id in held_before)
        assert {run.job_id for run in runs} == set(keys_of)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("store", CHAOS_STORES)
async def test_a_debounce_storm_from_four_processes_runs_each_key_once(
    tmp_path: Path, store: str
) -> None:
    per_producer = 2_500 if long_run() else 400
    async with Cluster(tmp_path, store) as cluster:
        app = await cluster.app()
        acked = cluster.dir / "debounced.txt"
        producers = [
            cluster.spawn(
                "debouncer",
                [sys.executable, "-m", DEBOUNCER, "--out", str(acked), "--count",
                 str(per_producer), "--keys", str(KEYS), "--producer", str(p)],
            )
            for p in range(4)
        ]  # fmt: skip
        for proc in producers:
            assert await proc.wait_exit(180, "debounce producer") == 0, proc.tail()
        lines = [line.split() for line in acked.read_text().splitlines()]
        assert len(lines) == 4 * per_producer
        job_of: dict[str, set[str]] = defaultdict(set)
        last_of: dict[str, dict[int, int]] = defaultdict(dict)  # key -> producer -> last n
        for key, producer, n, job_id in lines:
            job_of[key].add(job_id)
            last_of[key][int(producer)] = max(last_of[key].get(int(producer), -1), int(n))
        # No worker ran during the storm: every enqueue of a key found one job.
        assert {key: len(ids) for key, ids in job_of.items()} == dict.fromkeys(job_of, 1)
        assert await app.count_jobs(task="chaos.debounced") == KEYS
        cluster.start_worker(10, env=KEYED_WORKER)

        async def all_ran() -> bool:
            return await app.count_jobs(JobState.COMPLETED, task="chaos.debounced") == KEYS

        await cluster.wait_until(all_ran, 60, "the debounced jobs did not all run")
        await asyncio.sleep(1.0)  # anything run twice would show by now
        runs = [run for run in cluster.runs() if run.task == "chaos.debounced"]
        stored = await get_jobs(app, [next(iter(ids)) for ids in job_of.values()])
        report(
            "debounce storm, 4 producer processes",
            store,
            jobs=len(lines),
            faults=0,
            lost=KEYS - len(stored),
            duplicated=len(runs) - KEYS,
            bound=0,
            passed=len(runs) == KEYS,
            note=f"{KEYS} keys",
        )
        assert len(runs) == KEYS, f"{len(runs)} runs for {KEYS} debounced keys"
        for key, ids in job_of.items():
            job = stored[next(iter(ids))]
            result = job.result
            assert result["key"] == key
            # It ran with a payload some producer wrote last for that key.
            assert last_of[key][result["producer"]] == result["n"], (key, result)
            assert job.payload == {"key": key, "producer": result["producer"], "n": result["n"]}

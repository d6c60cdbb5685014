"""A real ``conveyor worker`` process drains 1,000 jobs of a batch task with
``batch_size=100``, one poisoned job in each batch."""

from __future__ import annotations

import asyncio
from pathlib import Path

from conveyor import Conveyor, JobState

from .conftest import Cli


async def _enqueue(url: str, count: int) -> None:
    app = Conveyor(url)
    try:
        # This app does not register the task: the attempts go with each job.
        await app.enqueue_many([("embed", {"n": n}, {"attempts": 2}) for n in range(1, count + 1)])
    finally:
        await app.close()


async def _states(url: str) -> dict[int, tuple[JobState, int, object]]:
    app = Conveyor(url)
    try:
        jobs = await app.list_jobs(task="embed", limit=2000)
        return {job.payload["n"]: (job.state, job.attempts, job.result) for job in jobs}
    finally:
        await app.close()


def test_a_worker_process_drains_batches_with_a_poisoned_job_in_each(
    cli: Cli, tmp_path: Path
) -> None:
    log = tmp_path / "batches.log"
    cli.env["BATCH_LOG"] = str(log)
    asyncio.run(_enqueue(cli.url, 1000))

    done = cli.run("worker", "apps.batches:app", "--burst", timeout=120)
    assert "Traceback" not in done.stderr

    states = asyncio.run(_states(cli.url))
    assert len(states) == 1000
    sizes = [int(line) for line in log.read_text().split()]
    assert max(sizes) == 100
    first_batches = 0
    for n, (state, attempts, result) in states.items():
        if n % 100 == 0:  # poisoned every time: fails alone, after its 2 attempts
            assert (state, attempts, result) == (JobState.FAILED, 2, None)
        elif attempts == 2:  # the first job of a first-attempt batch
            first_batches += 1
            assert (state, result) == (JobState.COMPLETED, n * 2)
        else:  # every other job of a batch keeps its own outcome
            assert (state, attempts, result) == (JobState.COMPLETED, 1, n * 2)
    # Every job ran once, then each poisoned one again: the log adds up.
    assert sum(sizes) == 1000 + first_batches + 10
    assert first_batches >= 10  # at least ten batches of at most 100

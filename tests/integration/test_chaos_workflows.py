"""Workflows under real worker processes on every store: a chord of 1,000
children whose workers lose one of their number to SIGKILL mid-run, and a
diamond whose middle step fails and is retried from the dead-letter queue.

The callback's own record (the recorder's run rows and the file it writes
with the results it read) is the evidence, not just the stored state: a
callback that ran twice, or early with a missing result, shows there.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from chaos_helpers import CHAOS_STORES, Cluster, get_jobs

from conveyor import FailureReason, JobFailed, JobState, WorkflowState, chain, chord, group

pytestmark = pytest.mark.slow

#: A killed worker's jobs come back within seconds (a sibling's stall reaper).
KILL_LEASE = {"CONVEYOR_LEASE": "2s", "CONVEYOR_MAX_STALLED": "100"}
CHILDREN = 1_000


def gathered(cluster: Cluster, job_id: str) -> list[list[int]]:
    """The results each run of the callback ``job_id`` read, one list a run."""
    files = sorted(cluster.runs_dir.glob(f"gathered-{job_id}-*.json"))
    return [json.loads(path.read_text()) for path in files]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("store", CHAOS_STORES)
async def test_a_chord_survives_a_killed_worker(tmp_path: Path, store: str) -> None:
    """1,000 children over 4 worker processes, one SIGKILLed while children
    still run: every child completes and the callback runs exactly once, with
    all 1,000 results in order."""
    async with Cluster(tmp_path, store) as cluster:
        app = await cluster.app()
        member = app.tasks["chaos.member"]
        members = group(*(member.step(n=n, seconds=0.02) for n in range(CHILDREN)))
        workflow = await app.start(chord(members, app.tasks["chaos.gather"].step()))
        callback = workflow.jobs[-1]
        workers = [cluster.start_worker(8, env=KILL_LEASE) for _ in range(4)]
        victim = workers[0]

        async def victim_busy() -> bool:
            # Mid-run: the victim has run children, and most are still to come.
            return sum(run.pid == victim.pid for run in cluster.runs()) >= 25

        await cluster.wait_until(victim_busy, 60, "the victim never ran a child")
        os.killpg(victim.pid, signal.SIGKILL)
        assert victim.popen.wait(10) == -signal.SIGKILL
        (at_kill,) = (await get_jobs(app, [callback.id])).values()
        assert at_kill.state is JobState.BLOCKED, "the kill came after every child finished"

        assert await workflow.wait(timeout=90, poll=0.25) == CHILDREN
        assert workflow.state is WorkflowState.COMPLETED
        children = workflow.jobs[:-1]
        assert {job.state for job in children} == {JobState.COMPLETED}
        assert [job.result for job in children] == list(range(CHILDREN))

        runs = [run for run in cluster.runs() if run.job_id == callback.id]
        assert [(run.outcome, run.pid != victim.pid) for run in runs] == [("done", True)]
        assert gathered(cluster, callback.id) == [list(range(CHILDREN))]
        ran = {run.job_id for run in cluster.runs() if run.task == "chaos.member"}
        assert ran == {job.id for job in children}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("store", CHAOS_STORES)
async def test_a_diamond_resumes_after_a_dead_letter_retry(tmp_path: Path, store: str) -> None:
    """root -> (plain, heals) -> total: ``heals`` fails its only attempt, so
    the join is cancelled ``dependency_failed`` and the workflow fails; once
    healed and retried from the dead-letter queue, the workflow completes and
    the join runs once, reading the copy's result."""
    async with Cluster(tmp_path, store) as cluster:
        app = await cluster.app()
        member, heals, total = (app.tasks[f"chaos.{name}"] for name in ("member", "heals", "total"))
        workflow = await app.start(
            chain(member.step(n=3), group(member.step(n=4), heals.step()), total.step())
        )
        for _ in range(2):
            cluster.start_worker(4)

        with pytest.raises(JobFailed):
            await workflow.wait(timeout=60, poll=0.1)
        assert workflow.state is WorkflowState.FAILED
        failed = next(job for job in workflow.jobs if job.task == "chaos.heals")
        join = workflow.jobs[-1]
        assert join.state is JobState.CANCELLED
        assert join.failure_reason is FailureReason.DEPENDENCY_FAILED
        assert [run.job_id for run in cluster.runs() if run.task == "chaos.total"] == []

        (cluster.runs_dir / "healed").touch()
        copy = await app.dlq.retry(failed.id)
        assert copy.workflow_id == workflow.id
        assert await workflow.wait(timeout=60, poll=0.1) == 34  # 4 + 3 * 10
        assert workflow.state is WorkflowState.COMPLETED

        done = {job.task: job for job in workflow.jobs if job.task != "chaos.member"}
        assert done["chaos.heals"].id == copy.id
        assert copy.id in done["chaos.total"].depends_on
        outcomes = [(run.task, run.outcome) for run in cluster.runs() if run.task != "chaos.member"]
        assert outcomes == [
            ("chaos.heals", "error"),
            ("chaos.heals", "done"),
            ("chaos.total", "done"),
        ]

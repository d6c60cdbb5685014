"""prune_jobs and workflows: a workflow's jobs are pruned together, once every
one is terminal and due, so that no job keeps a dependency on a pruned one."""

from __future__ import annotations

import asyncio

from conveyor.backends.base import Backend, JobFilter, Outcome, PruneRule
from conveyor.job import Job, JobState

from .helpers import enqueue, fetch, new_job
from .test_dependency_retry import finish
from .test_retention import finished, surviving

DONE = JobState.COMPLETED
FAILED = JobState.FAILED


async def chain_of(backend: Backend, workflow_id: str, length: int) -> list[Job]:
    """A chain of ``length`` jobs in one workflow (the first waiting, the rest blocked)."""
    made = [new_job("step", workflow_id=workflow_id)]
    for _ in range(length - 1):
        made.append(new_job("step", depends_on=[made[-1].id], workflow_id=workflow_id))
    return await enqueue(backend, *made)


async def workflow_jobs(backend: Backend, workflow_id: str) -> list[Job]:
    return await backend.list_jobs(JobFilter(workflow_id=workflow_id), limit=100)


async def test_a_running_workflow_keeps_its_finished_jobs(backend: Backend) -> None:
    a, b, c = await chain_of(backend, "wf-running", 3)
    await finish(backend, a, Outcome.COMPLETE)
    await asyncio.sleep(0.003)
    plain = await finished(backend, 1)
    # a is due by age and by count, but b still waits for it (and reads its result).
    rules = [PruneRule(DONE, max_age=0, max_count=0)]
    assert await backend.prune_jobs(rules) == 1
    assert await surviving(backend, plain) == set()
    assert (await fetch(backend, a.id)).state is DONE
    assert len(await workflow_jobs(backend, "wf-running")) == 3

    await finish(backend, await fetch(backend, b.id), Outcome.COMPLETE)
    await finish(backend, await fetch(backend, c.id), Outcome.COMPLETE)
    assert await backend.prune_jobs(rules) == 3
    assert await workflow_jobs(backend, "wf-running") == []


async def test_a_workflow_goes_only_when_every_job_is_due(backend: Backend) -> None:
    """Two jobs of one workflow (no dependency between them), one completed and
    one failed: a rule for completed jobs alone deletes neither."""
    ok, bad = await enqueue(
        backend, new_job("a", workflow_id="wf-mixed"), new_job("b", workflow_id="wf-mixed")
    )
    await finish(backend, ok, Outcome.COMPLETE)
    await finish(backend, bad, Outcome.FAIL)
    assert await backend.prune_jobs([PruneRule(DONE, max_count=0)]) == 0
    assert len(await workflow_jobs(backend, "wf-mixed")) == 2
    # failed jobs are kept for a count of one: the workflow's is the newest
    rules = [PruneRule(DONE, max_count=0), PruneRule(FAILED, max_count=1)]
    assert await backend.prune_jobs(rules) == 0
    await asyncio.sleep(0.003)
    newer = await finished(backend, 1, state=FAILED)
    assert await backend.prune_jobs(rules) == 2
    assert await workflow_jobs(backend, "wf-mixed") == []
    assert await surviving(backend, newer) == set(newer)


async def test_counts_rank_workflow_jobs_with_plain_ones(backend: Backend) -> None:
    """A count keeps the newest jobs, workflow ones included: the older
    workflow is due and goes whole; the newer plain jobs stay."""
    first, second = await chain_of(backend, "wf-old", 2)
    await finish(backend, first, Outcome.COMPLETE)
    await asyncio.sleep(0.003)
    await finish(backend, await fetch(backend, second.id), Outcome.COMPLETE)
    await asyncio.sleep(0.003)
    plain = await finished(backend, 2)
    assert await backend.prune_jobs([PruneRule(DONE, max_count=2)]) == 2
    assert await workflow_jobs(backend, "wf-old") == []
    assert await surviving(backend, plain) == set(plain)


async def test_a_workflow_partly_within_the_count_is_kept_whole(backend: Backend) -> None:
    plain = await finished(backend, 2)
    await asyncio.sleep(0.003)
    first, second = await chain_of(backend, "wf-straddles", 2)
    await finish(backend, first, Outcome.COMPLETE)
    await asyncio.sleep(0.003)
    await finish(backend, await fetch(backend, second.id), Outcome.COMPLETE)
    # the newest one is the workflow's second job: its first is due, yet kept
    assert await backend.prune_jobs([PruneRule(DONE, max_count=1)]) == 2
    assert await surviving(backend, plain) == set()
    assert len(await workflow_jobs(backend, "wf-straddles")) == 2


async def test_a_workflow_job_of_a_task_kept_by_its_own_rule(backend: Backend) -> None:
    """Per-task rules: the workflow's "keep" job is under a rule that keeps it
    (no limit), so its "step" jobs stay too, though their rule deletes all."""
    step, keep = await enqueue(
        backend, new_job("step", workflow_id="wf-task"), new_job("keep", workflow_id="wf-task")
    )
    await finish(backend, step, Outcome.COMPLETE)
    await finish(backend, keep, Outcome.COMPLETE)
    rules = [PruneRule(DONE, task="keep"), PruneRule(DONE, max_count=0, exclude_tasks=["keep"])]
    assert await backend.prune_jobs(rules) == 0
    assert len(await workflow_jobs(backend, "wf-task")) == 2
    rules[0] = PruneRule(DONE, max_age=0, task="keep")
    assert await backend.prune_jobs(rules) == 2

"""prune_jobs: retention by age and by count, per task; never live jobs."""

from __future__ import annotations

import asyncio

from conveyor.backends.base import Backend, JobFilter, PruneRule
from conveyor.job import JobState

from .helpers import (
    again_when_late,
    claim,
    enqueue,
    enqueue_one,
    fetch,
    make_finished,
    new_job,
    ran_before,
)

DONE = JobState.COMPLETED


async def finished(
    backend: Backend, count: int, task: str = "t", state: JobState = DONE
) -> list[str]:
    """``count`` jobs finished one after another (distinct ``finished_at``)."""
    made = []
    for _ in range(count):
        made.append((await make_finished(backend, state, task)).id)
        await asyncio.sleep(0.003)
    return made


async def surviving(backend: Backend, job_ids: list[str]) -> set[str]:
    return {j.id for j in await backend.get_jobs(job_ids)}


@again_when_late
async def test_prune_by_age(backend: Backend) -> None:
    old = await finished(backend, 2)
    await asyncio.sleep(0.25)
    made = await backend.now()
    new = await finished(backend, 1)
    deleted = await backend.prune_jobs([PruneRule(DONE, max_age=0.2)])
    await ran_before(backend, made + 0.2, "the prune")  # "new" was younger than max_age
    assert deleted == 2
    assert await surviving(backend, old + new) == set(new)


async def test_prune_by_count_keeps_the_newest(backend: Backend) -> None:
    made = await finished(backend, 5)
    assert await backend.prune_jobs([PruneRule(DONE, max_count=2)]) == 3
    assert await surviving(backend, made) == set(made[-2:])
    assert await backend.prune_jobs([PruneRule(DONE, max_count=2)]) == 0


@again_when_late
async def test_age_and_count_in_one_rule(backend: Backend) -> None:
    old = await finished(backend, 2)
    await asyncio.sleep(0.25)
    made = await backend.now()
    new = await finished(backend, 3)
    deleted = await backend.prune_jobs([PruneRule(DONE, max_age=0.2, max_count=2)])
    await ran_before(backend, made + 0.2, "the prune")  # "new" was younger than max_age
    assert deleted == 3
    assert await surviving(backend, old + new) == set(new[-2:])


async def test_count_zero_deletes_all_of_the_state(backend: Backend) -> None:
    made = await finished(backend, 3)
    assert await backend.prune_jobs([PruneRule(DONE, max_count=0)]) == 3
    assert await surviving(backend, made) == set()


async def test_rule_for_one_task_and_the_rest(backend: Backend) -> None:
    a = await finished(backend, 3, "a")
    b = await finished(backend, 3, "b")
    c = await finished(backend, 3, "c")
    deleted = await backend.prune_jobs(
        [
            PruneRule(DONE, max_count=1, task="a"),
            PruneRule(DONE, max_count=2, exclude_tasks=["a"]),
        ]
    )
    assert deleted == 2 + 4
    # "a" keeps its newest one; "b" and "c" share a count of two: the two newest overall.
    assert await surviving(backend, a) == {a[-1]}
    assert await surviving(backend, b + c) == set(c[-2:])


async def test_rule_only_touches_its_state(backend: Backend) -> None:
    done = await finished(backend, 2)
    failed = await finished(backend, 2, state=JobState.FAILED)
    cancelled = await finished(backend, 2, state=JobState.CANCELLED)
    assert await backend.prune_jobs([PruneRule(JobState.FAILED, max_count=0)]) == 2
    assert await surviving(backend, done + failed + cancelled) == set(done + cancelled)
    assert await backend.prune_jobs([PruneRule(JobState.CANCELLED, max_age=0)]) == 2
    assert await surviving(backend, done + cancelled) == set(done)


async def test_never_live_jobs(backend: Backend) -> None:
    (waiting, delayed) = await enqueue(backend, new_job(queue="w"), new_job(queue="w", delay=60))
    await enqueue_one(backend, queue="a")
    (active,) = (await claim(backend, ["a"])).jobs
    await asyncio.sleep(0.05)
    rules = [PruneRule(state, max_age=0, max_count=0) for state in JobState]
    assert await backend.prune_jobs(rules) == 0
    for job in (waiting, delayed, active):
        assert (await fetch(backend, job.id)).state is job.state
    assert await backend.count_jobs(JobFilter()) == 3


async def test_no_limits_keep_everything(backend: Backend) -> None:
    await finished(backend, 3)
    assert await backend.prune_jobs([PruneRule(DONE)]) == 0
    assert await backend.prune_jobs([]) == 0
    assert await backend.count_jobs(JobFilter()) == 3

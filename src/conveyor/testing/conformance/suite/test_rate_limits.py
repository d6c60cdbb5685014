"""Rate limits: a sliding log of starts per task, shared by every claimer."""

from __future__ import annotations

import asyncio

from conveyor.backends.base import Backend, JobFilter
from conveyor.job import JobState
from conveyor.ratelimit import RateLimit

from .helpers import claim, new_job

LIMITS = {"limited": RateLimit(3, 0.5)}


async def fill(backend: Backend, count: int = 10, task: str = "limited") -> None:
    await backend.enqueue_jobs([new_job(task) for _ in range(count)])


async def test_limit_then_nothing_until_the_window_slides(backend: Backend) -> None:
    await fill(backend)
    first = await claim(backend, limit=10, rate_limits=LIMITS)
    assert len(first.jobs) == 3
    assert (await claim(backend, limit=10, rate_limits=LIMITS)).jobs == []
    await asyncio.sleep(0.55)
    assert len((await claim(backend, limit=10, rate_limits=LIMITS)).jobs) == 3


async def test_window_slides_rather_than_resets(backend: Backend) -> None:
    await fill(backend)
    assert len((await claim(backend, limit=2, rate_limits=LIMITS)).jobs) == 2  # t=0
    await asyncio.sleep(0.25)
    assert len((await claim(backend, limit=10, rate_limits=LIMITS)).jobs) == 1  # t=0.25
    await asyncio.sleep(0.3)
    # t=0.55: the two starts at t=0 left the window, the one at t=0.25 has not.
    assert len((await claim(backend, limit=10, rate_limits=LIMITS)).jobs) == 2


async def test_jobs_over_the_limit_keep_waiting(backend: Backend) -> None:
    await fill(backend, 5)
    await claim(backend, limit=10, rate_limits=LIMITS)
    await claim(backend, limit=10, rate_limits=LIMITS)
    assert await backend.count_jobs(JobFilter(states=[JobState.WAITING])) == 2
    assert await backend.count_jobs(JobFilter(states=[JobState.FAILED])) == 0


async def test_other_tasks_are_not_limited(backend: Backend) -> None:
    await fill(backend, 5)
    await fill(backend, 5, task="free")
    result = await claim(backend, limit=100, rate_limits=LIMITS)
    tasks = [j.task for j in result.jobs]
    assert tasks.count("limited") == 3
    assert tasks.count("free") == 5


async def test_limited_task_does_not_block_lower_priority_work(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job("limited", priority=10) for _ in range(5)])
    await backend.enqueue_jobs([new_job("free", priority=0) for _ in range(2)])
    result = await claim(backend, limit=4, rate_limits=LIMITS)
    assert [j.task for j in result.jobs] == ["limited"] * 3 + ["free"]


async def test_shared_between_claimers(backend: Backend) -> None:
    await fill(backend)
    a = await claim(backend, limit=2, worker_id="a", rate_limits=LIMITS)
    b = await claim(backend, limit=10, worker_id="b", rate_limits=LIMITS)
    assert len(a.jobs) == 2
    assert len(b.jobs) == 1


async def test_concurrent_claimers_together_respect_the_limit(backend: Backend) -> None:
    await fill(backend, 30)
    results = await asyncio.gather(
        *(claim(backend, limit=5, worker_id=f"w{i}", rate_limits=LIMITS) for i in range(10))
    )
    assert sum(len(r.jobs) for r in results) == 3


async def test_cluster_wide_across_backend_instances(
    backend_pair: tuple[Backend, Backend],
) -> None:
    first, second = backend_pair
    await fill(first)
    assert len((await claim(first, limit=2, rate_limits=LIMITS)).jobs) == 2
    assert len((await claim(second, limit=10, rate_limits=LIMITS)).jobs) == 1
    assert (await claim(first, limit=10, rate_limits=LIMITS)).jobs == []
    await asyncio.sleep(0.55)
    assert len((await claim(second, limit=10, rate_limits=LIMITS)).jobs) == 3


async def test_task_limit_and_rate_limit_together(backend: Backend) -> None:
    await fill(backend)
    result = await claim(backend, limit=10, rate_limits=LIMITS, task_limits={"limited": 1})
    assert len(result.jobs) == 1
    # only the one claimed start was recorded
    assert len((await claim(backend, limit=10, rate_limits=LIMITS)).jobs) == 2


async def test_prune_keeps_the_live_window(backend: Backend) -> None:
    await fill(backend)
    assert len((await claim(backend, limit=10, rate_limits=LIMITS)).jobs) == 3
    await backend.prune_jobs([])
    assert (await claim(backend, limit=10, rate_limits=LIMITS)).jobs == []

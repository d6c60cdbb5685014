"""Backpressure: a queue's max_size counts waiting + delayed; a batch over it stores nothing."""

from __future__ import annotations

import pytest

from conveyor.backends.base import Backend, JobFilter, QueueInfo
from conveyor.errors import QueueFull
from conveyor.job import JobState

from .helpers import claim, enqueue, new_job


async def test_max_size_counts_waiting_and_delayed(backend: Backend) -> None:
    await backend.configure_queue(QueueInfo("small", max_size=3, ttl=None))
    await enqueue(backend, new_job(queue="small"), new_job(queue="small", delay=60))
    await enqueue(backend, new_job(queue="small"))
    with pytest.raises(QueueFull) as caught:
        await enqueue(backend, new_job(queue="small", delay=60))
    assert caught.value.queue == "small"
    assert caught.value.max_size == 3
    assert await backend.count_jobs(JobFilter(queue="small")) == 3


async def test_queue_full_stores_nothing_of_the_batch(backend: Backend) -> None:
    await backend.configure_queue(QueueInfo("small", max_size=2, ttl=None))
    await enqueue(backend, new_job(queue="small"))
    batch = [new_job(queue="big"), new_job(queue="small"), new_job(queue="small"), new_job()]
    with pytest.raises(QueueFull):
        await backend.enqueue_jobs(batch)
    assert await backend.get_jobs([n.id for n in batch]) == []
    assert await backend.count_jobs(JobFilter()) == 1


async def test_a_batch_alone_over_the_limit(backend: Backend) -> None:
    await backend.configure_queue(QueueInfo("small", max_size=2, ttl=None))
    with pytest.raises(QueueFull):
        await backend.enqueue_jobs([new_job(queue="small") for _ in range(3)])
    assert await backend.count_jobs(JobFilter()) == 0
    assert len(await backend.enqueue_jobs([new_job(queue="small") for _ in range(2)])) == 2


async def test_active_and_finished_jobs_do_not_count(backend: Backend) -> None:
    await backend.configure_queue(QueueInfo("small", max_size=2, ttl=None))
    await enqueue(backend, new_job(queue="small"), new_job(queue="small"))
    with pytest.raises(QueueFull):
        await enqueue(backend, new_job(queue="small"))
    assert len((await claim(backend, ["small"], limit=2)).jobs) == 2
    await enqueue(backend, new_job(queue="small"), new_job(queue="small"))
    counts = (await backend.queue_counts())["small"]
    assert counts["active"] == 2
    assert counts["waiting"] == 2


async def test_other_queues_are_not_limited(backend: Backend) -> None:
    await backend.configure_queue(QueueInfo("small", max_size=1, ttl=None))
    await enqueue(backend, new_job(queue="small"))
    await backend.enqueue_jobs([new_job(queue="other") for _ in range(5)])
    assert await backend.count_jobs(JobFilter(queue="other")) == 5


async def test_duplicates_are_not_new_jobs(backend: Backend) -> None:
    await backend.configure_queue(QueueInfo("small", max_size=1, ttl=None))
    (first,) = await enqueue(backend, new_job(queue="small", idempotency_key="k"))
    (again,) = await enqueue(backend, new_job(queue="small", idempotency_key="k"))
    assert again.duplicate
    assert again.id == first.id


async def test_raising_or_removing_the_limit(backend: Backend) -> None:
    await backend.configure_queue(QueueInfo("small", max_size=1, ttl=None))
    await enqueue(backend, new_job(queue="small"))
    with pytest.raises(QueueFull):
        await enqueue(backend, new_job(queue="small"))
    await backend.configure_queue(QueueInfo("small", max_size=None, ttl=None))
    await backend.enqueue_jobs([new_job(queue="small") for _ in range(3)])
    assert await backend.count_jobs(JobFilter(queue="small", states=[JobState.WAITING])) == 4

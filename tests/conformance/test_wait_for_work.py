"""wait_for_work: wakes on new work in the listened queues, else after the timeout."""

from __future__ import annotations

import asyncio
import time

from conveyor.backends.base import Backend, Outcome

from .helpers import claim, claim_one, enqueue, enqueue_one, new_job, settle_ok

#: Generous: a backend may poll rather than be notified, but not for seconds.
PROMPT = 1.5


async def timed_wait(backend: Backend, queues: list[str], timeout: float) -> float:
    started = time.monotonic()
    await backend.wait_for_work(queues, timeout)
    return time.monotonic() - started


async def test_times_out_when_nothing_comes(backend: Backend) -> None:
    took = await timed_wait(backend, ["default"], 0.3)
    assert 0.25 <= took < 0.3 + PROMPT


async def test_zero_timeout_returns_at_once(backend: Backend) -> None:
    assert await timed_wait(backend, ["default"], 0) < 0.2


async def test_wakes_on_enqueue(backend: Backend) -> None:
    waiter = asyncio.create_task(timed_wait(backend, ["default"], 10))
    await asyncio.sleep(0.05)
    await enqueue_one(backend)
    assert await asyncio.wait_for(waiter, 10) < PROMPT


async def test_wakes_on_enqueue_from_another_instance(
    backend_pair: tuple[Backend, Backend],
) -> None:
    producer, worker = backend_pair
    waiter = asyncio.create_task(timed_wait(worker, ["default"], 10))
    await asyncio.sleep(0.05)
    await enqueue_one(producer)
    assert await asyncio.wait_for(waiter, 10) < PROMPT


async def test_wakes_when_a_delayed_job_comes_due(backend: Backend) -> None:
    await enqueue(backend, new_job(delay=0.3))
    took = await timed_wait(backend, ["default"], 10)
    assert took < 0.3 + PROMPT


async def test_wakes_on_release(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend)
    waiter = asyncio.create_task(timed_wait(backend, ["default"], 10))
    await asyncio.sleep(0.05)
    await settle_ok(backend, job, Outcome.RELEASE)
    assert await asyncio.wait_for(waiter, 10) < PROMPT


async def test_many_waiters_all_wake(backend: Backend) -> None:
    waiters = [asyncio.create_task(timed_wait(backend, ["default"], 10)) for _ in range(5)]
    await asyncio.sleep(0.05)
    await enqueue_one(backend)
    took = await asyncio.wait_for(asyncio.gather(*waiters), 10)
    assert max(took) < PROMPT


async def test_work_that_came_before_the_wait_is_not_slept_through(
    backend_pair: tuple[Backend, Backend],
) -> None:
    # A worker's empty claim, then a job from another producer, then its wait:
    # the notification came while nobody listened and must still count.
    producer, worker = backend_pair
    await worker.wait_for_work(["default"], 0.3)  # listening from here on
    assert (await claim(worker, ["default"], limit=1)).jobs == []
    await enqueue_one(producer)
    await asyncio.sleep(0.1)  # the notification lands while nobody waits
    assert await timed_wait(worker, ["default"], 5) < 1.0

"""wait_for_work: wakes on new work in the listened queues, else after the timeout."""

from __future__ import annotations

import asyncio
import time

import pytest

from conveyor.backends.base import Backend, Outcome

from .helpers import claim, claim_one, enqueue, enqueue_one, new_job, settle_ok

#: The waits' own timeout: waking well before it can only be the work's doing.
WAIT = 60.0
#: How soon a wait must wake: far below WAIT, far above any pause of the host.
PROMPT = 30.0


async def timed_wait(backend: Backend, queues: list[str], timeout: float) -> float:
    started = time.monotonic()
    await backend.wait_for_work(queues, timeout)
    return time.monotonic() - started


async def test_times_out_when_nothing_comes(backend: Backend) -> None:
    took = await timed_wait(backend, ["default"], 0.3)
    assert 0.25 <= took < 0.3 + PROMPT


async def test_zero_timeout_returns_at_once(backend: Backend) -> None:
    # Zero is no wait, not "no timeout": a wait for work that never comes.
    assert await asyncio.wait_for(timed_wait(backend, ["default"], 0), PROMPT) < PROMPT


async def test_wakes_on_enqueue(backend: Backend) -> None:
    waiter = asyncio.create_task(timed_wait(backend, ["default"], WAIT))
    await asyncio.sleep(0.05)
    await enqueue_one(backend)
    assert await asyncio.wait_for(waiter, WAIT + PROMPT) < PROMPT


@pytest.mark.parametrize(
    "head_start",
    [
        # The worker's wait is live (subscribed / LISTENing) before the enqueue.
        pytest.param(0.05, id="listening"),
        # Its first wait has begun starting its listener, which is not live yet:
        # work that lands before it is must still end that wait.
        pytest.param(0.0, id="while-the-first-wait-sets-up"),
    ],
)
async def test_wakes_on_enqueue_from_another_instance(
    backend_pair: tuple[Backend, Backend], head_start: float
) -> None:
    producer, worker = backend_pair
    waiter = asyncio.create_task(timed_wait(worker, ["default"], WAIT))
    await asyncio.sleep(head_start)
    await enqueue_one(producer)
    assert await asyncio.wait_for(waiter, WAIT + PROMPT) < PROMPT


async def test_a_first_wait_returns_for_work_that_came_before_it(
    backend_pair: tuple[Backend, Backend],
) -> None:
    # Nothing listened when this job was enqueued: no notification can end the
    # wait, so the wait must look for waiting work once it listens.
    producer, worker = backend_pair
    await enqueue_one(producer)
    assert await timed_wait(worker, ["default"], WAIT) < PROMPT


async def test_wakes_when_a_delayed_job_comes_due(backend: Backend) -> None:
    await enqueue(backend, new_job(delay=0.3))
    took = await timed_wait(backend, ["default"], WAIT)
    assert took < 0.3 + PROMPT


async def test_wakes_on_release(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend)
    waiter = asyncio.create_task(timed_wait(backend, ["default"], WAIT))
    await asyncio.sleep(0.05)
    await settle_ok(backend, job, Outcome.RELEASE)
    assert await asyncio.wait_for(waiter, WAIT + PROMPT) < PROMPT


async def test_many_waiters_all_wake(backend: Backend) -> None:
    waiters = [asyncio.create_task(timed_wait(backend, ["default"], WAIT)) for _ in range(5)]
    await asyncio.sleep(0.05)
    await enqueue_one(backend)
    took = await asyncio.wait_for(asyncio.gather(*waiters), WAIT + PROMPT)
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
    assert await timed_wait(worker, ["default"], WAIT) < PROMPT

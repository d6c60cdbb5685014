"""Rate limits per key: one sliding window of starts per ``(task,
rate_limit_key)``, with the per-task window's mechanics, shared by every
claimer; a key over its limit is skipped, never waited on."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

from conveyor.backends.base import Backend, JobFilter, Outcome
from conveyor.ids import new_id
from conveyor.job import FailureReason, Job, JobState
from conveyor.ratelimit import RateLimit

from .helpers import claim, enqueue_one, error, fetch, new_job, settle_ok

#: Three starts per key per half second.
RATES = {"keyed": RateLimit(3, 0.5)}


async def fill(backend: Backend, per_key: int, keys: Sequence[str | None], **options: Any) -> None:
    await backend.enqueue_jobs(
        [new_job("keyed", rate_limit_key=key, **options) for key in keys for _ in range(per_key)]
    )


def by_key(jobs: Sequence[Job]) -> Counter[str | None]:
    return Counter(job.rate_limit_key for job in jobs)


async def test_rate_key_is_stored_with_the_job(backend: Backend) -> None:
    job = await enqueue_one(backend, "keyed", rate_limit_key="api-7")
    assert job.rate_limit_key == "api-7"
    assert (await fetch(backend, job.id)).rate_limit_key == "api-7"
    plain = await enqueue_one(backend, "keyed")
    assert (await fetch(backend, plain.id)).rate_limit_key is None


async def test_rate_key_one_claim_takes_at_most_the_limit_per_key(backend: Backend) -> None:
    await fill(backend, 5, ["a", "b"])
    result = await claim(backend, limit=100, key_rate_limits=RATES)
    assert by_key(result.jobs) == {"a": 3, "b": 3}
    assert await backend.count_jobs(JobFilter(states=[JobState.WAITING])) == 4


async def test_rate_key_jobs_without_a_key_share_one_window(backend: Backend) -> None:
    await fill(backend, 5, [None])
    assert len((await claim(backend, limit=100, key_rate_limits=RATES)).jobs) == 3


async def test_rate_key_a_spent_key_does_not_block_the_keys_behind_it(backend: Backend) -> None:
    # Key "a" fills the head of the queue (higher priority); "b" waits behind it.
    await fill(backend, 10, ["a"], priority=5)
    await fill(backend, 2, ["b"])
    first = await claim(backend, limit=2, key_rate_limits=RATES)
    assert by_key(first.jobs) == {"a": 2}
    second = await claim(backend, limit=10, key_rate_limits=RATES)
    assert by_key(second.jobs) == {"a": 1, "b": 2}
    assert (await claim(backend, limit=10, key_rate_limits=RATES)).jobs == []


async def test_rate_key_window_slides_rather_than_resets(backend: Backend) -> None:
    await fill(backend, 10, ["a"])
    assert len((await claim(backend, limit=2, key_rate_limits=RATES)).jobs) == 2  # t=0
    await asyncio.sleep(0.25)
    assert len((await claim(backend, limit=10, key_rate_limits=RATES)).jobs) == 1  # t=0.25
    await asyncio.sleep(0.3)
    # t=0.55: the two starts at t=0 left the window, the one at t=0.25 has not.
    assert len((await claim(backend, limit=10, key_rate_limits=RATES)).jobs) == 2


async def test_rate_key_settling_does_not_give_a_start_back(backend: Backend) -> None:
    await fill(backend, 5, ["a"])
    result = await claim(backend, limit=100, key_rate_limits=RATES)
    for job in result.jobs:
        await settle_ok(backend, job, Outcome.COMPLETE)
    assert (await claim(backend, limit=100, key_rate_limits=RATES)).jobs == []
    await asyncio.sleep(0.55)
    assert len((await claim(backend, limit=100, key_rate_limits=RATES)).jobs) == 2


async def test_rate_key_other_tasks_are_not_limited(backend: Backend) -> None:
    await fill(backend, 5, ["a"])
    await backend.enqueue_jobs([new_job("free", rate_limit_key="a") for _ in range(5)])
    result = await claim(backend, limit=100, key_rate_limits=RATES)
    assert Counter(job.task for job in result.jobs) == {"keyed": 3, "free": 5}


async def test_rate_key_windows_are_per_task(backend: Backend) -> None:
    await fill(backend, 5, ["a"])
    await backend.enqueue_jobs([new_job("other", rate_limit_key="a") for _ in range(5)])
    rates = {**RATES, "other": RateLimit(1, 0.5)}
    result = await claim(backend, limit=100, key_rate_limits=rates)
    assert Counter(job.task for job in result.jobs) == {"keyed": 3, "other": 1}


async def test_rate_key_windows_are_apart_from_the_task_window(backend: Backend) -> None:
    # The task's own (unkeyed) window and a key's window of the same name never mix.
    await fill(backend, 5, ["a"])
    assert len((await claim(backend, limit=100, rate_limits=RATES)).jobs) == 3
    await fill(backend, 5, ["b"])
    result = await claim(backend, limit=100, key_rate_limits=RATES)
    assert by_key(result.jobs) == {"a": 2, "b": 3}


async def test_rate_key_shared_between_claimers(backend: Backend) -> None:
    await fill(backend, 10, ["a"])
    first = await claim(backend, limit=2, worker_id="w1", key_rate_limits=RATES)
    second = await claim(backend, limit=10, worker_id="w2", key_rate_limits=RATES)
    assert (len(first.jobs), len(second.jobs)) == (2, 1)


async def test_rate_key_concurrent_claimers_together_respect_each_window(
    backend: Backend,
) -> None:
    await fill(backend, 12, ["a", "b", "c"])
    results = await asyncio.gather(
        *(claim(backend, limit=4, worker_id=f"w{i}", key_rate_limits=RATES) for i in range(10))
    )
    assert by_key([job for r in results for job in r.jobs]) == {"a": 3, "b": 3, "c": 3}


async def test_rate_key_windows_are_shared_across_backend_instances(
    backend_pair: tuple[Backend, Backend],
) -> None:
    first, second = backend_pair
    await fill(first, 10, ["a"])
    assert len((await claim(first, limit=2, key_rate_limits=RATES)).jobs) == 2
    assert len((await claim(second, limit=10, key_rate_limits=RATES)).jobs) == 1
    assert (await claim(first, limit=10, key_rate_limits=RATES)).jobs == []


async def test_rate_key_with_task_limits_and_key_limits(backend: Backend) -> None:
    # Every limit applies at once; only the starts claimed count in the window.
    await fill(backend, 5, ["a"], concurrency_key="k")
    result = await claim(backend, limit=100, key_rate_limits=RATES, key_limits={"keyed": 1})
    assert len(result.jobs) == 1
    (running,) = result.jobs
    await settle_ok(backend, running, Outcome.COMPLETE)
    result = await claim(backend, limit=100, key_rate_limits=RATES, task_limits={"keyed": 1})
    assert len(result.jobs) == 1
    assert len((await claim(backend, limit=100, key_rate_limits=RATES)).jobs) == 1


async def test_rate_key_with_the_task_rate_limit(backend: Backend) -> None:
    # A task window of 4 and per-key windows of 3: both bind.
    await fill(backend, 5, ["a", "b"])
    result = await claim(
        backend, limit=100, key_rate_limits=RATES, rate_limits={"keyed": RateLimit(4, 0.5)}
    )
    assert len(result.jobs) == 4
    assert max(by_key(result.jobs).values()) <= 3


async def test_rate_key_prune_keeps_the_live_window(backend: Backend) -> None:
    await fill(backend, 5, ["a"])
    assert len((await claim(backend, limit=10, key_rate_limits=RATES)).jobs) == 3
    await backend.prune_jobs([])
    assert (await claim(backend, limit=10, key_rate_limits=RATES)).jobs == []


async def test_rate_key_order_within_a_key_is_kept(backend: Backend) -> None:
    await fill(backend, 2, ["a"], priority=1)
    await fill(backend, 2, ["a"], priority=9)
    result = await claim(backend, limit=100, key_rate_limits={"keyed": RateLimit(2, 5.0)})
    assert [job.priority for job in result.jobs] == [9, 9]


async def test_rate_key_a_dead_letter_retry_keeps_the_key(backend: Backend) -> None:
    await fill(backend, 1, ["api-1"], max_attempts=1)
    (running,) = (await claim(backend, limit=10, key_rate_limits=RATES)).jobs
    await settle_ok(
        backend, running, Outcome.FAIL, error=error(), failure_reason=FailureReason.ERROR
    )
    copy = await backend.retry_failed(running.id, new_id())
    assert copy.rate_limit_key == "api-1"
    assert (await fetch(backend, copy.id)).rate_limit_key == "api-1"


async def test_rate_key_is_kept_by_every_kind_of_enqueue(backend: Backend) -> None:
    first = new_job("keyed", rate_limit_key="k-plain")
    jobs = [
        first,
        new_job("keyed"),  # no key, in the same batch as keyed ones
        new_job("keyed", rate_limit_key="k-delayed", delay=60.0),
        new_job("keyed", rate_limit_key="k-debounced", idempotency_key="i-1", debounce=60.0),
        new_job("keyed", rate_limit_key="k-blocked", depends_on=[first.id]),
        new_job("keyed", rate_limit_key="k-rich", tenant="t", metadata={"m": 1}, ttl=60.0),
    ]
    stored = await backend.enqueue_jobs(jobs)
    expected = [job.rate_limit_key for job in jobs]
    assert [job.rate_limit_key for job in stored] == expected
    assert [(await fetch(backend, job.id)).rate_limit_key for job in jobs] == expected

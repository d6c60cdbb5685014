"""Per-key concurrency: at most N active jobs of a task per ``concurrency_key``,
counted in the store over every claimer; a slot is held exactly while a job is
``active``."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from conveyor import serialization
from conveyor.backends.base import Backend, JobFilter, Outcome
from conveyor.ids import new_id
from conveyor.job import FailureReason, Job, JobState

from .helpers import claim, enqueue_one, error, fetch, new_job, settle_ok

CAPS = {"capped": 2}


async def fill(backend: Backend, per_key: int, keys: Sequence[str | None], **options: Any) -> None:
    await backend.enqueue_jobs(
        [new_job("capped", concurrency_key=key, **options) for key in keys for _ in range(per_key)]
    )


def by_key(jobs: Sequence[Job]) -> Counter[str | None]:
    return Counter(job.concurrency_key for job in jobs)


async def running_by_key(backend: Backend) -> Counter[str | None]:
    active = await backend.list_jobs(JobFilter(states=[JobState.ACTIVE]), limit=10_000)
    return by_key([job for job in active if job.task == "capped"])


async def test_the_key_is_stored_with_the_job(backend: Backend) -> None:
    job = await enqueue_one(backend, "capped", concurrency_key="acct-42")
    assert job.concurrency_key == "acct-42"
    assert (await fetch(backend, job.id)).concurrency_key == "acct-42"
    plain = await enqueue_one(backend, "capped")
    assert (await fetch(backend, plain.id)).concurrency_key is None


async def test_one_claim_takes_at_most_the_cap_per_key(backend: Backend) -> None:
    await fill(backend, 5, ["a", "b"])
    result = await claim(backend, limit=100, key_limits=CAPS)
    assert by_key(result.jobs) == {"a": 2, "b": 2}
    assert await backend.count_jobs(JobFilter(states=[JobState.WAITING])) == 6


async def test_jobs_without_a_key_share_one_group(backend: Backend) -> None:
    await fill(backend, 5, [None])
    result = await claim(backend, limit=100, key_limits=CAPS)
    assert len(result.jobs) == 2


async def test_a_full_key_does_not_block_the_keys_behind_it(backend: Backend) -> None:
    await fill(backend, 10, ["busy"], priority=10)
    await fill(backend, 2, ["quiet"])
    result = await claim(backend, limit=3, key_limits=CAPS)
    assert by_key(result.jobs) == {"busy": 2, "quiet": 1}


async def test_slots_are_counted_across_claims(backend: Backend) -> None:
    await fill(backend, 5, ["a"])
    assert len((await claim(backend, limit=1, key_limits=CAPS)).jobs) == 1
    assert len((await claim(backend, limit=100, key_limits=CAPS)).jobs) == 1
    assert (await claim(backend, limit=100, key_limits=CAPS)).jobs == []


async def test_jobs_claimed_without_the_cap_count_too(backend: Backend) -> None:
    await fill(backend, 5, ["a"])
    assert len((await claim(backend, limit=3)).jobs) == 3
    assert (await claim(backend, limit=100, key_limits=CAPS)).jobs == []


async def test_other_tasks_are_not_capped(backend: Backend) -> None:
    await fill(backend, 5, ["a"])
    await backend.enqueue_jobs([new_job("free", concurrency_key="a") for _ in range(5)])
    result = await claim(backend, limit=100, key_limits=CAPS)
    assert Counter(job.task for job in result.jobs) == {"capped": 2, "free": 5}


async def test_the_cap_is_per_task(backend: Backend) -> None:
    await fill(backend, 3, ["a"])
    await backend.enqueue_jobs([new_job("other", concurrency_key="a") for _ in range(3)])
    result = await claim(backend, limit=100, key_limits={"capped": 1, "other": 1})
    assert Counter(job.task for job in result.jobs) == {"capped": 1, "other": 1}


async def test_task_limits_and_key_limits_together(backend: Backend) -> None:
    await fill(backend, 3, ["a", "b", "c"])
    result = await claim(backend, limit=100, key_limits=CAPS, task_limits={"capped": 3})
    assert len(result.jobs) == 3
    assert max(by_key(result.jobs).values()) <= 2


_SETTLE_FIELDS: dict[Outcome, dict[str, Any]] = {
    Outcome.COMPLETE: {"result": serialization.dumps(1)},
    Outcome.RETRY: {"error": error(), "retry_delay": 30.0},
    Outcome.FAIL: {"error": error(), "failure_reason": FailureReason.ERROR},
    Outcome.CANCEL: {},
    Outcome.RELEASE: {"retry_delay": 30.0},
}


@pytest.mark.parametrize("outcome", list(_SETTLE_FIELDS), ids=str)
async def test_every_settle_gives_the_slot_back(backend: Backend, outcome: Outcome) -> None:
    await fill(backend, 4, ["a"])
    first = await claim(backend, limit=100, key_limits=CAPS)
    assert len(first.jobs) == 2
    await settle_ok(backend, first.jobs[0], outcome, **_SETTLE_FIELDS[outcome])
    again = await claim(backend, limit=100, key_limits=CAPS)
    assert len(again.jobs) == 1
    assert await running_by_key(backend) == {"a": 2}


async def test_a_release_to_waiting_gives_the_slot_back(backend: Backend) -> None:
    await fill(backend, 2, ["a"])
    first = await claim(backend, limit=100, key_limits=CAPS)
    await settle_ok(backend, first.jobs[0], Outcome.RELEASE)
    again = await claim(backend, limit=100, key_limits=CAPS)
    assert [job.id for job in again.jobs] == [first.jobs[0].id]


async def test_stall_recovery_gives_the_slots_back(backend: Backend) -> None:
    await fill(backend, 4, ["a"])
    first = await claim(backend, limit=100, lease=0.2, key_limits=CAPS)
    assert len(first.jobs) == 2
    await asyncio.sleep(0.4)
    recovered = await backend.recover_stalled(max_stalled=3)
    assert len(recovered.requeued) == 2
    again = await claim(backend, limit=100, key_limits=CAPS)
    assert len(again.jobs) == 2


async def test_a_stall_that_fails_the_job_gives_the_slot_back(backend: Backend) -> None:
    await fill(backend, 3, ["a"], max_attempts=1)
    first = await claim(backend, limit=100, lease=0.2, key_limits=CAPS)
    assert len(first.jobs) == 2
    await asyncio.sleep(0.4)
    recovered = await backend.recover_stalled(max_stalled=3)
    assert len(recovered.failed) == 2
    assert len((await claim(backend, limit=100, key_limits=CAPS)).jobs) == 1


async def test_cancel_of_a_running_job_frees_its_slot_when_it_settles(backend: Backend) -> None:
    await fill(backend, 3, ["a"])
    first = await claim(backend, limit=100, key_limits=CAPS)
    await backend.cancel_job(first.jobs[0].id)
    assert (await claim(backend, limit=100, key_limits=CAPS)).jobs == []
    await settle_ok(backend, first.jobs[0], Outcome.CANCEL)
    assert len((await claim(backend, limit=100, key_limits=CAPS)).jobs) == 1


async def test_concurrent_claimers_together_keep_the_cap(backend: Backend) -> None:
    await fill(backend, 10, ["a", "b", "c"])
    results = await asyncio.gather(
        *(claim(backend, limit=4, worker_id=f"w{i}", key_limits=CAPS) for i in range(10))
    )
    claimed = [job for result in results for job in result.jobs]
    assert by_key(claimed) == {"a": 2, "b": 2, "c": 2}


async def test_key_slots_are_shared_across_backend_instances(
    backend_pair: tuple[Backend, Backend],
) -> None:
    first, second = backend_pair
    await fill(first, 5, ["a"])
    assert len((await claim(first, limit=1, key_limits=CAPS)).jobs) == 1
    assert len((await claim(second, limit=100, key_limits=CAPS)).jobs) == 1
    assert (await claim(first, limit=100, key_limits=CAPS)).jobs == []


async def test_a_freed_slot_goes_to_the_next_job_of_the_key_in_order(backend: Backend) -> None:
    await fill(backend, 1, ["a"], priority=5)
    await fill(backend, 1, ["a"], priority=9)
    await fill(backend, 1, ["a"], priority=1)
    first = await claim(backend, limit=100, key_limits={"capped": 1})
    assert [job.priority for job in first.jobs] == [9]
    await settle_ok(backend, first.jobs[0], Outcome.COMPLETE, result=serialization.dumps(1))
    second = await claim(backend, limit=100, key_limits={"capped": 1})
    assert [job.priority for job in second.jobs] == [5]


async def test_a_dead_letter_retry_keeps_the_key(backend: Backend) -> None:
    await fill(backend, 1, ["acct-1"], max_attempts=1)
    (running,) = (await claim(backend, limit=10, key_limits=CAPS)).jobs
    await settle_ok(
        backend, running, Outcome.FAIL, error=error(), failure_reason=FailureReason.ERROR
    )
    copy = await backend.retry_failed(running.id, new_id())
    assert copy.concurrency_key == "acct-1"
    assert (await fetch(backend, copy.id)).concurrency_key == "acct-1"

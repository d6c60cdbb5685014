"""Idempotency keys: one job per key while the key lives, even after the row is gone (G7)."""

from __future__ import annotations

import asyncio

from conveyor.backends.base import Backend, JobFilter, Outcome, PruneRule
from conveyor.job import JobState

from .helpers import again_when_late, claim_one, enqueue, fetch, new_job, ran_before, settle_ok


async def test_duplicate_returns_the_existing_job(backend: Backend) -> None:
    (first,) = await enqueue(backend, new_job(payload={"v": 1}, idempotency_key="k"))
    (again,) = await enqueue(backend, new_job(payload={"v": 2}, idempotency_key="k"))
    assert first.duplicate is False
    assert again.duplicate is True
    assert again.id == first.id
    assert again.payload == {"v": 1}
    assert again.idempotency_key == "k"
    assert await backend.count_jobs(JobFilter()) == 1
    assert (await fetch(backend, first.id)).duplicate is False


async def test_duplicate_reports_the_current_state(backend: Backend) -> None:
    await enqueue(backend, new_job(idempotency_key="k"))
    running = await claim_one(backend)
    (again,) = await enqueue(backend, new_job(idempotency_key="k"))
    assert again.duplicate
    assert again.id == running.id
    assert again.state is JobState.ACTIVE


async def test_same_key_for_another_task_is_still_a_duplicate(backend: Backend) -> None:
    (first,) = await enqueue(backend, new_job("a", idempotency_key="k"))
    (again,) = await enqueue(backend, new_job("b", "other", idempotency_key="k"))
    assert again.duplicate
    assert again.id == first.id
    assert again.task == "a"
    assert await backend.count_jobs(JobFilter()) == 1


async def test_duplicate_within_one_batch(backend: Backend) -> None:
    one, other, two = await backend.enqueue_jobs(
        [
            new_job(payload={"n": 1}, idempotency_key="k"),
            new_job(idempotency_key="other"),
            new_job(payload={"n": 2}, idempotency_key="k"),
        ]
    )
    assert one.duplicate is False
    assert other.duplicate is False
    assert two.duplicate is True
    assert two.id == one.id
    assert two.payload == {"n": 1}
    assert await backend.count_jobs(JobFilter()) == 2


async def test_jobs_without_a_key_are_never_duplicates(backend: Backend) -> None:
    jobs = await backend.enqueue_jobs([new_job(), new_job()])
    assert len({j.id for j in jobs}) == 2
    assert not any(j.duplicate for j in jobs)


@again_when_late
async def test_after_the_key_ttl_a_new_job_is_created(backend: Backend) -> None:
    keyed = await backend.now()
    (first,) = await enqueue(backend, new_job(idempotency_key="k", idempotency_ttl=0.2))
    (dup,) = await enqueue(backend, new_job(idempotency_key="k", idempotency_ttl=0.2))
    await ran_before(backend, keyed + 0.2, "the second enqueue")  # while the key lived
    assert dup.duplicate
    assert dup.id == first.id
    await asyncio.sleep(0.27)
    fresh_new = new_job(idempotency_key="k")
    (fresh,) = await enqueue(backend, fresh_new)
    assert fresh.duplicate is False
    assert fresh.id == fresh_new.id != first.id
    assert await backend.count_jobs(JobFilter()) == 2
    # ... and the new key is live in turn
    (dup2,) = await enqueue(backend, new_job(idempotency_key="k"))
    assert dup2.duplicate
    assert dup2.id == fresh.id


async def test_key_outlives_the_pruned_job_row(backend: Backend) -> None:
    (first,) = await enqueue(backend, new_job("report", "reports", idempotency_key="k"))
    running = await claim_one(backend, "reports")
    await settle_ok(backend, running, Outcome.COMPLETE, result=b"1")
    await asyncio.sleep(0.02)
    deleted = await backend.prune_jobs([PruneRule(JobState.COMPLETED, max_age=0)])
    assert deleted == 1
    assert await backend.get_job(first.id) is None

    (again,) = await enqueue(backend, new_job(idempotency_key="k"))
    assert again.duplicate is True
    assert again.id == first.id
    assert again.task == "report"
    assert again.queue == "reports"
    assert again.state is JobState.COMPLETED
    assert await backend.count_jobs(JobFilter()) == 0


async def test_expired_key_is_dropped_by_prune(backend: Backend) -> None:
    (first,) = await enqueue(backend, new_job(idempotency_key="k", idempotency_ttl=0.2))
    running = await claim_one(backend)
    await settle_ok(backend, running, Outcome.COMPLETE)
    await asyncio.sleep(0.27)
    assert await backend.prune_jobs([PruneRule(JobState.COMPLETED, max_age=0)]) == 1
    (fresh,) = await enqueue(backend, new_job(idempotency_key="k"))
    assert fresh.duplicate is False
    assert fresh.id != first.id


async def test_concurrent_enqueues_of_one_key_make_one_job(backend: Backend) -> None:
    batches = await asyncio.gather(
        *(backend.enqueue_jobs([new_job(idempotency_key="once")]) for _ in range(20))
    )
    results = [job for batch in batches for job in batch]
    assert len({j.id for j in results}) == 1
    assert sum(not j.duplicate for j in results) == 1
    assert await backend.count_jobs(JobFilter()) == 1


async def test_two_instances_share_the_keys(backend_pair: tuple[Backend, Backend]) -> None:
    first, second = backend_pair
    (original,) = await enqueue(first, new_job(idempotency_key="k"))
    (again,) = await enqueue(second, new_job(idempotency_key="k"))
    assert again.duplicate
    assert again.id == original.id


async def test_filter_by_idempotency_key(backend: Backend) -> None:
    (keyed,) = await enqueue(backend, new_job(idempotency_key="welcome-42"))
    await enqueue(backend, new_job(), new_job(idempotency_key="other"))
    listed = await backend.list_jobs(JobFilter(idempotency_key="welcome-42"))
    assert [j.id for j in listed] == [keyed.id]
    assert listed[0].idempotency_key == "welcome-42"

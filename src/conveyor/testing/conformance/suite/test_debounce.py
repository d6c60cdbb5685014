"""Debounce: while a key's job has not started, a debounced enqueue replaces its
payload and metadata and postpones it; once it started, the next one is new."""

from __future__ import annotations

import asyncio
from typing import Any

from conveyor import serialization
from conveyor.backends.base import Backend, JobFilter, NewJob, Outcome
from conveyor.job import JobState

from .helpers import CLOCK_SLACK, claim, enqueue, fetch, new_job, settle_ok


def debounced(
    payload: dict[str, object], key: str = "k", wait: float = 5.0, **options: Any
) -> NewJob:
    return new_job("t", payload=payload, idempotency_key=key, debounce=wait, **options)


async def test_a_debounced_job_waits_delayed(backend: Backend) -> None:
    before = await backend.now()
    (job,) = await enqueue(backend, debounced({"n": 1}))
    assert job.state is JobState.DELAYED
    assert not job.duplicate
    assert before + 5.0 - CLOCK_SLACK <= job.run_at <= before + 5.0 + CLOCK_SLACK * 4


async def test_the_next_enqueue_replaces_payload_and_postpones(backend: Backend) -> None:
    (first,) = await enqueue(backend, debounced({"n": 1}, metadata={"m": 1}))
    await asyncio.sleep(0.05)
    (second,) = await enqueue(backend, debounced({"n": 2}, metadata={"m": 2}))
    assert second.id == first.id
    assert second.duplicate
    stored = await fetch(backend, first.id)
    assert stored.payload == {"n": 2}
    assert stored.metadata == {"m": 2}
    assert stored.state is JobState.DELAYED
    assert stored.run_at > first.run_at
    assert await backend.count_jobs(JobFilter(idempotency_key="k")) == 1


async def test_a_waiting_job_is_postponed_too(backend: Backend) -> None:
    (plain,) = await enqueue(backend, new_job("t", payload={"n": 1}, idempotency_key="k"))
    assert plain.state is JobState.WAITING
    (again,) = await enqueue(backend, debounced({"n": 2}))
    assert again.id == plain.id
    assert again.duplicate
    stored = await fetch(backend, plain.id)
    assert (stored.state, stored.payload) == (JobState.DELAYED, {"n": 2})
    assert (await claim(backend, limit=10)).jobs == []


async def test_once_started_the_next_enqueue_is_a_new_job(backend: Backend) -> None:
    (first,) = await enqueue(backend, debounced({"n": 1}, wait=0.05))
    await asyncio.sleep(0.3)
    running = await claim(backend, limit=10)
    assert [job.id for job in running.jobs] == [first.id]
    (second,) = await enqueue(backend, debounced({"n": 2}))
    assert second.id != first.id
    assert not second.duplicate
    assert (await fetch(backend, first.id)).payload == {"n": 1}
    # The key now belongs to the new job: a further enqueue replaces it.
    (third,) = await enqueue(backend, debounced({"n": 3}))
    assert third.id == second.id
    assert third.duplicate
    assert (await fetch(backend, second.id)).payload == {"n": 3}


async def test_a_finished_key_job_makes_a_new_job(backend: Backend) -> None:
    (first,) = await enqueue(backend, debounced({"n": 1}, wait=0.05))
    await asyncio.sleep(0.3)
    (running,) = (await claim(backend, limit=10)).jobs
    await settle_ok(backend, running, Outcome.COMPLETE, result=serialization.dumps(1))
    (second,) = await enqueue(backend, debounced({"n": 2}))
    assert second.id != first.id
    assert not second.duplicate


async def test_a_plain_enqueue_of_the_key_still_deduplicates(backend: Backend) -> None:
    (first,) = await enqueue(backend, debounced({"n": 1}))
    (plain,) = await enqueue(backend, new_job("t", payload={"n": 2}, idempotency_key="k"))
    assert plain.id == first.id
    assert plain.duplicate
    assert (await fetch(backend, first.id)).payload == {"n": 1}


async def test_in_one_batch_the_last_payload_wins(backend: Backend) -> None:
    jobs = await enqueue(backend, *(debounced({"n": n}) for n in range(5)))
    assert len({job.id for job in jobs}) == 1
    assert [job.duplicate for job in jobs] == [False, True, True, True, True]
    assert (await fetch(backend, jobs[0].id)).payload == {"n": 4}


async def test_keys_are_independent(backend: Backend) -> None:
    a, b = await enqueue(backend, debounced({"n": 1}, key="a"), debounced({"n": 2}, key="b"))
    assert a.id != b.id
    assert await backend.count_jobs(JobFilter(states=[JobState.DELAYED])) == 2


async def test_a_storm_of_concurrent_enqueues_leaves_one_job(backend: Backend) -> None:
    async def one(n: int) -> str:
        (job,) = await enqueue(backend, debounced({"n": n}))
        return job.id

    ids = await asyncio.gather(*(one(n) for n in range(40)))
    assert len(set(ids)) == 1
    assert await backend.count_jobs(JobFilter(idempotency_key="k")) == 1
    stored = await fetch(backend, ids[0])
    assert stored.state is JobState.DELAYED
    assert stored.payload["n"] in range(40)

"""Per-key concurrency on Redis: the slot sets (``ka:<len>:<task>[:key]``) that
stand in for counting active jobs. What the conformance suite cannot see from
outside: the sets stay in step with every way in and out of ``active`` (a direct
handoff takes a slot too), a lost job does not hold its slot for good, and a
full group deep in a waiting set does not hide the jobs behind it."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis_fixtures import backend, client, url

from conveyor import serialization
from conveyor.backends.base import ClaimRequest, NewJob, Outcome, Settlement
from conveyor.backends.redis import RedisBackend
from conveyor.ids import new_ids
from conveyor.job import Job, JobState

__all__ = ["backend", "client", "url"]  # fixtures

CAPS = {"capped": 1}


def _jobs(count: int, key: str | None, priority: int = 0) -> list[NewJob]:
    return [
        NewJob(job_id, "capped", "default", b"{}", priority=priority, concurrency_key=key)
        for job_id in new_ids(count)
    ]


def _claim(limit: int = 10, worker: str = "w1", **options: object) -> ClaimRequest:
    return ClaimRequest(worker, ["default"], limit, 30.0, **options)  # type: ignore[arg-type]


async def _complete(backend: RedisBackend, job: Job) -> None:
    assert job.lease_token is not None
    done = Settlement(job.id, job.lease_token, Outcome.COMPLETE, result=serialization.dumps(1))
    assert (await backend.settle_jobs([done])).refused == set()


async def test_the_slot_sets_follow_claim_and_settle(
    backend: RedisBackend, client: aioredis.Redis
) -> None:
    await backend.enqueue_jobs(_jobs(2, "a") + _jobs(1, None))
    claimed = (await backend.claim_jobs(_claim())).jobs  # no key caps: slots all the same
    assert len(claimed) == 3
    group_a, no_key = backend.keys.slots("capped", "a"), backend.keys.slots("capped", None)
    assert await client.scard(group_a) == 2
    unkeyed = {j.id.encode() for j in claimed if j.concurrency_key is None}
    assert await client.smembers(no_key) == unkeyed
    for job in claimed:
        await _complete(backend, job)
    # Nothing left behind: a set per key would otherwise grow with every key seen.
    assert await client.exists(group_a, no_key) == 0


async def test_a_handed_off_job_holds_its_slot(
    backend: RedisBackend, client: aioredis.Redis
) -> None:
    """An idle worker (a request without key caps) is handed a capped task's job
    by the enqueue itself: it counts against the cap like a claimed one."""
    assert (await backend.claim_jobs(_claim(limit=1, handoff_for=5.0))).jobs == []
    first, second = _jobs(2, "a")
    await backend.enqueue_jobs([first])
    handed = await backend.next_handoff("w1", 2.0)
    assert handed is not None
    assert [j.id for h in handed for j in h.result.jobs] == [first.id]
    await backend.enqueue_jobs([second])
    assert (await backend.claim_jobs(_claim(worker="w2", key_limits=CAPS))).jobs == []
    # Given back by the end of the handoff and the release that follows.
    returned = await backend.end_handoffs("w1", 30.0)
    assert returned.jobs == []  # already popped: the worker holds it
    (running,) = handed[0].result.jobs
    await _complete(backend, running)
    again = await backend.claim_jobs(_claim(worker="w2", key_limits=CAPS))
    assert [j.id for j in again.jobs] == [second.id]


async def test_a_job_returned_by_the_end_of_handoffs_holds_its_slot_until_released(
    backend: RedisBackend,
) -> None:
    assert (await backend.claim_jobs(_claim(limit=1, handoff_for=5.0))).jobs == []
    first, second = _jobs(2, "a")
    await backend.enqueue_jobs([first, second])  # the first is handed, not popped
    assert (await backend.claim_jobs(_claim(worker="w2", key_limits=CAPS))).jobs == []
    (returned,) = (await backend.end_handoffs("w1", 30.0)).jobs
    assert (returned.id, returned.state) == (first.id, JobState.ACTIVE)
    assert (await backend.claim_jobs(_claim(worker="w2", key_limits=CAPS))).jobs == []
    assert returned.lease_token is not None
    release = Settlement(returned.id, returned.lease_token, Outcome.RELEASE)
    assert (await backend.settle_jobs([release])).refused == set()
    again = await backend.claim_jobs(_claim(worker="w2", key_limits=CAPS))
    assert [j.id for j in again.jobs] == [first.id]


async def test_a_claim_with_key_caps_registers_no_handoff(
    backend: RedisBackend, client: aioredis.Redis
) -> None:
    """A stored request would go stale as the worker's jobs run."""
    await backend.claim_jobs(_claim(key_limits=CAPS, handoff_for=5.0))
    assert await client.zcard(backend.keys.idle("default")) == 0


async def test_a_lost_job_gives_its_slot_back(
    backend: RedisBackend, client: aioredis.Redis
) -> None:
    """A job whose hash went outside the scripts (an eviction, a manual DEL) is
    still in its group's set; the claim that finds the group full checks it."""
    lost, kept = _jobs(2, "a")
    await backend.enqueue_jobs([lost, kept])
    (running,) = (await backend.claim_jobs(_claim(key_limits=CAPS))).jobs
    assert running.id == lost.id
    await client.delete(backend.keys.job(lost.id))
    again = await backend.claim_jobs(_claim(key_limits=CAPS))
    assert [j.id for j in again.jobs] == [kept.id]
    assert await client.smembers(backend.keys.slots("capped", "a")) == {kept.id.encode()}


async def test_a_long_run_of_a_full_group_does_not_hide_the_jobs_behind_it(
    backend: RedisBackend,
) -> None:
    """The claim walks the waiting set past the full group's jobs, page by page."""
    await backend.enqueue_jobs(_jobs(1, "busy", priority=9))
    (busy,) = (await backend.claim_jobs(_claim(key_limits=CAPS))).jobs
    await backend.enqueue_jobs(_jobs(700, "busy", priority=5))
    quiet = _jobs(3, None) + _jobs(1, "other")
    await backend.enqueue_jobs(quiet)
    claimed = (await backend.claim_jobs(_claim(limit=10, key_limits=CAPS))).jobs
    assert {j.concurrency_key for j in claimed} == {None, "other"}
    assert len(claimed) == 2
    assert busy.id not in {j.id for j in claimed}
    left = await backend.get_jobs([j.id for j in quiet])
    assert sorted(j.state.value for j in left) == ["active", "active", "waiting", "waiting"]

"""Debounce on Redis (``enqueue-5.lua``): the indexes a postponed job moves
between, the key's expiry, and a batch whose later debounced entry changes a
job an earlier entry stores."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from redis_fixtures import backend, client, url

from conveyor import serialization
from conveyor.backends.base import ClaimRequest, NewJob
from conveyor.backends.redis import RedisBackend
from conveyor.ids import new_id
from conveyor.job import JobState

__all__ = ["backend", "client", "url"]  # fixtures


def _job(n: int, debounce: float | None = None, **options: object) -> NewJob:
    return NewJob(
        new_id(),
        "t",
        "default",
        serialization.dumps({"n": n}),
        idempotency_key="k",
        debounce=debounce,
        **options,  # type: ignore[arg-type]
    )


async def test_a_postponed_waiting_job_leaves_the_waiting_and_expiring_indexes(
    backend: RedisBackend, client: aioredis.Redis
) -> None:
    (plain,) = await backend.enqueue_jobs([_job(1, ttl=60.0)])
    keys = backend.keys
    assert await client.zcard(keys.waiting("default", "t")) == 1
    assert await client.zscore(keys.expiring, plain.id) is not None
    (postponed,) = await backend.enqueue_jobs([_job(2, debounce=5.0)])
    assert postponed.id == plain.id
    assert await client.zcard(keys.waiting("default", "t")) == 0
    assert await client.zscore(keys.expiring, plain.id) is None
    due = await client.zscore(keys.delayed, plain.id)
    assert due is not None
    assert postponed.expires_at is not None
    assert postponed.expires_at == pytest.approx(due + 60.0)
    counts = (await backend.queue_counts())["default"]
    assert (counts["waiting"], counts["delayed"]) == (0, 1)


async def test_the_key_lives_on_from_the_postponing_enqueue(
    backend: RedisBackend, client: aioredis.Redis
) -> None:
    await backend.enqueue_jobs([_job(1, debounce=5.0, idempotency_ttl=2.0)])
    await backend.enqueue_jobs([_job(2, debounce=5.0, idempotency_ttl=600.0)])
    assert await client.pttl(backend.keys.idempotency("k")) > 500_000


async def test_a_later_debounced_entry_changes_a_job_of_the_same_batch(
    backend: RedisBackend,
) -> None:
    """A plain entry stores the key's job; a debounced one after it in the batch
    gives it its payload and delay: the job is never waiting, never handed out."""
    await backend.claim_jobs(ClaimRequest("w", ["default"], 5, 30.0, handoff_for=5.0))
    first, second = await backend.enqueue_jobs([_job(1), _job(2, debounce=5.0)])
    assert second.id == first.id
    assert (first.duplicate, second.duplicate) == (False, True)
    assert (first.state, first.payload) == (JobState.DELAYED, {"n": 2})
    (stored,) = await backend.get_jobs([first.id])
    assert (stored.state, stored.payload) == (JobState.DELAYED, {"n": 2})
    assert await backend.next_handoff("w", 0.1) == []

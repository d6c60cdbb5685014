"""Dependencies on Redis beyond the conformance suite: what they leave in the
key space, the wake-up of a released job, and the cost of a settle for jobs
that have no dependents (the flag read with the fields settle reads anyway)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from redis.crc import key_slot
from redis_servers import RedisServer, delete_prefix, key_pattern

from conveyor.backends.base import ClaimRequest, NewJob, Outcome, Settlement
from conveyor.backends.redis import RedisBackend
from conveyor.ids import new_id
from conveyor.job import Job, JobState


def _job(queue: str = "default", **options: object) -> NewJob:
    return NewJob(id=new_id(), task="t", queue=queue, payload=b"{}", **options)  # type: ignore[arg-type]


def _done(jobs: list[Job]) -> list[Settlement]:
    return [Settlement(j.id, j.lease_token or "", Outcome.COMPLETE, task=j.task) for j in jobs]


@pytest.fixture
async def shared(redis_url: str) -> AsyncIterator[tuple[RedisBackend, str]]:
    prefix = f"t{uuid.uuid4().hex}"
    backend = RedisBackend(f"{redis_url}?prefix={prefix}")
    await backend.open()
    try:
        yield backend, prefix
    finally:
        await backend.close()
        await delete_prefix(redis_url, prefix)


async def _keys(redis_url: str, prefix: str) -> list[bytes]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        return [key async for key in client.scan_iter(key_pattern(prefix))]
    finally:
        await client.aclose()


async def test_dependency_keys_share_the_slot_and_go_when_resolved(
    shared: tuple[RedisBackend, str], redis_url: str
) -> None:
    backend, prefix = shared
    root = _job()
    left, right = _job(depends_on=[root.id]), _job(depends_on=[root.id])
    join = _job(depends_on=[left.id, right.id], workflow_id="wf")
    await backend.enqueue_jobs([root, left, right, join])
    keys = await _keys(redis_url, prefix)
    k = backend.keys
    names = {key.decode() for key in keys}
    assert {k.blocked, k.dependents(root.id), k.dependents(left.id)} <= names
    assert {key_slot(key) for key in keys} == {key_slot(k.all.encode())}

    for _ in range(3):  # root, then left and right, then the join
        claimed = await backend.claim_jobs(ClaimRequest("w", ["default"], 10, 30.0))
        await backend.settle_jobs(_done(claimed.jobs))
    assert (await backend.get_job(join.id)).state is JobState.COMPLETED  # type: ignore[union-attr]
    names = {key.decode() for key in await _keys(redis_url, prefix)}
    assert not any(":dep:" in name for name in names)
    assert k.blocked not in names  # an emptied sorted set is deleted


async def test_a_released_job_wakes_its_queue(
    shared: tuple[RedisBackend, str], redis_url: str
) -> None:
    backend, prefix = shared
    first = _job("upstream")
    then = _job("downstream", depends_on=[first.id])
    await backend.enqueue_jobs([first, then])
    claimed = await backend.claim_jobs(ClaimRequest("w", ["upstream"], 1, 30.0))
    waiter = RedisBackend(f"{redis_url}?prefix={prefix}")
    await waiter.open()
    try:
        waiting = asyncio.ensure_future(waiter.wait_for_work(["downstream"], 10))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # nothing due there while it is blocked
        started = time.monotonic()
        await backend.settle_jobs(_done(claimed.jobs))
        await asyncio.wait_for(waiting, 5)
        assert time.monotonic() - started < 2
    finally:
        await waiter.close()


def _calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


async def test_settling_jobs_without_dependents_reads_nothing_more(tmp_path: Path) -> None:
    """Per settled job: one HMGET, one HDEL, one HSET, whatever other jobs of the
    app have dependents; the dependents of the one job that has them are
    resolved with the few calls that takes."""
    count = 50
    with RedisServer(tmp_path / "calls") as server:
        client = redis.Redis(port=server.port)
        backend = RedisBackend(server.url())
        await backend.open()
        try:
            plain = [_job() for _ in range(count)]
            parent = _job("other")
            await backend.enqueue_jobs([*plain, parent, _job("other", depends_on=[parent.id])])
            claimed = await backend.claim_jobs(ClaimRequest("w", ["default"], count, 30.0))
            assert len(claimed.jobs) == count
            client.config_resetstat()
            await backend.settle_jobs(_done(claimed.jobs))
            calls = _calls(client)
            assert calls["hmget"] == calls["hdel"] == calls["hset"] == count
            assert "smembers" not in calls
            assert "hget" not in calls
            assert sum(calls.values()) - 3 * count < 12  # the batch's own calls

            (held,) = (await backend.claim_jobs(ClaimRequest("w", ["other"], 1, 30.0))).jobs
            client.config_resetstat()
            await backend.settle_jobs(_done([held]))
            calls = _calls(client)
            assert calls["smembers"] == 1  # its dependents set, read once
            assert calls["hmget"] == 2  # its own fields, then its dependent's
        finally:
            await backend.close()
            client.close()

"""The Redis backend beyond the conformance suite: URL options, safety checks,
NOSCRIPT, the hash-tagged key layout, typed errors, and memory per job.

Tests that reconfigure, flush or kill a server start their own (redis_servers.py);
the rest use the shared server on their own key prefix.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from redis.crc import key_slot
from redis_servers import RedisServer, delete_prefix, free_port, key_pattern

from conveyor import serialization
from conveyor.backends.base import (
    ClaimRequest,
    JobFilter,
    NewJob,
    Outcome,
    PruneRule,
    QueueInfo,
    Settlement,
)
from conveyor.backends.redis import RedisBackend
from conveyor.backends.redis.url import parse_url
from conveyor.errors import BackendUnavailable, ConfigurationError, NotReplicated
from conveyor.ids import new_ids
from conveyor.job import JobState


def _jobs(count: int, payload: bytes = b"{}", **options: object) -> list[NewJob]:
    return [
        NewJob(id=job_id, task="t", queue="default", payload=payload, **options)  # type: ignore[arg-type]
        for job_id in new_ids(count)
    ]


@pytest.fixture
async def shared(redis_url: str) -> AsyncIterator[tuple[RedisBackend, str]]:
    """An opened backend on the shared server, on a fresh prefix (deleted after)."""
    prefix = f"t{uuid.uuid4().hex}"
    backend = RedisBackend(f"{redis_url}?prefix={prefix}")
    await backend.open()
    try:
        yield backend, prefix
    finally:
        await backend.close()
        await delete_prefix(redis_url, prefix)


# -- URL options -------------------------------------------------------------------


def test_url_options_are_parsed() -> None:
    options = parse_url(
        "redis://h:6380/2?prefix=app&wait_replicas=1&wait_timeout=250ms"
        "&maxmemory_check=refuse&socket_timeout=3s&client_name=x"
    )
    assert options.prefix == "app"
    assert options.wait_replicas == 1
    assert options.wait_timeout == pytest.approx(0.25)
    assert options.maxmemory_check == "refuse"
    assert options.socket_timeout == pytest.approx(3.0)
    assert options.client_url == "redis://h:6380/2?client_name=x"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://h?prefix={x}", "prefix"),
        ("redis://h?prefix=", "prefix"),
        ("redis://h?maxmemory_check=maybe", "maxmemory_check"),
        ("redis://h?wait_replicas=-1", "wait_replicas"),
        ("redis://h?wait_replicas=two", "wait_replicas"),
        ("redis://h?wait_timeout=soon", "wait_timeout"),
        ("redis://h?cluster=perhaps", "cluster"),
        ("redis://h?cluster=true&wait_replicas=1", "wait_replicas"),
        ("redis://h/3?cluster=true", "database 0"),
        ("redis://h?protocol=3", "unknown Redis option 'protocol'"),
        ("redis://h?bogus=1", "unknown Redis option 'bogus'"),
    ],
)
def test_bad_url_options_are_refused(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RedisBackend(url)


# -- typed errors, never a hang -----------------------------------------------------


async def test_a_server_that_is_not_there_is_unavailable_at_once() -> None:
    backend = RedisBackend(f"redis://127.0.0.1:{free_port()}/0?connect_timeout=1s")
    started = time.monotonic()
    with pytest.raises(BackendUnavailable):
        await backend.open()
    assert time.monotonic() - started < 3


async def test_a_stopped_server_times_out_as_unavailable(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "frozen") as server:
        backend = RedisBackend(server.url(socket_timeout="300ms"))
        await backend.open()
        assert server.proc is not None
        server.proc.send_signal(19)  # SIGSTOP: connected, but it never answers
        try:
            started = time.monotonic()
            with pytest.raises(BackendUnavailable):
                await backend.enqueue_jobs(_jobs(1))
            assert time.monotonic() - started < 2
        finally:
            server.proc.send_signal(18)  # SIGCONT
        # Once it answers again, the same backend works again (a fresh connection).
        deadline = time.monotonic() + 10
        while True:
            try:
                assert len(await backend.enqueue_jobs(_jobs(1))) == 1
                break
            except BackendUnavailable:
                assert time.monotonic() < deadline, "the backend never recovered"
                await asyncio.sleep(0.1)
        await backend.close()


async def test_unopened_backend_is_unavailable() -> None:
    with pytest.raises(BackendUnavailable):
        await RedisBackend("redis://127.0.0.1:1/0").now()


# -- safety ----------------------------------------------------------------------------


async def test_an_evicting_server_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with RedisServer(tmp_path / "lru", ["--maxmemory-policy", "allkeys-lru"]) as server:
        backend = RedisBackend(server.url())
        with caplog.at_level(logging.WARNING, logger="conveyor.backends.redis"):
            await backend.open()
        await backend.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("allkeys-lru" in m and "EVICT" in m for m in warnings), warnings


async def test_an_evicting_server_is_refused_when_asked(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "lru", ["--maxmemory-policy", "volatile-lru"]) as server:
        backend = RedisBackend(server.url(maxmemory_check="refuse"))
        with pytest.raises(ConfigurationError, match="volatile-lru"):
            await backend.open()
        await backend.close()


async def test_noeviction_is_accepted_silently(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with RedisServer(tmp_path / "safe", ["--maxmemory-policy", "noeviction"]) as server:
        backend = RedisBackend(server.url(maxmemory_check="refuse"))
        with caplog.at_level(logging.WARNING, logger="conveyor.backends.redis"):
            await backend.open()
        await backend.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_wait_mode_refuses_an_unreplicated_enqueue(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "alone") as server:
        backend = RedisBackend(server.url(wait_replicas="1", wait_timeout="100ms"))
        await backend.open()
        jobs = _jobs(3)
        with pytest.raises(NotReplicated) as info:
            await backend.enqueue_jobs(jobs)
        assert (info.value.acknowledged, info.value.required) == (0, 1)
        # The write reached the primary: nothing is lost, only unconfirmed.
        assert len(await backend.get_jobs([j.id for j in jobs])) == 3
        await backend.close()


async def test_wait_mode_acknowledges_with_a_real_replica(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "primary", ["--repl-diskless-sync-delay", "0"]) as primary:
        replica = RedisServer(tmp_path / "replica", ["--replicaof", "127.0.0.1", str(primary.port)])
        with replica:
            client = redis.Redis(port=primary.port)
            deadline = time.monotonic() + 10
            while client.info("replication").get("connected_slaves", 0) < 1:
                assert time.monotonic() < deadline, "the replica never connected"
                await asyncio.sleep(0.05)
            backend = RedisBackend(primary.url(wait_replicas="1", wait_timeout="5s"))
            await backend.open()
            (job,) = await backend.enqueue_jobs(_jobs(1))
            copy = redis.Redis(port=replica.port)
            assert copy.hget(backend.keys.job(job.id), "t") == b"t"
            # A server that forgot the scripts (a promoted replica, a restart):
            # WAIT mode loads them again too.
            client.script_flush()
            (again,) = await backend.enqueue_jobs(_jobs(1))
            assert copy.hget(backend.keys.job(again.id), "t") == b"t"
            await backend.close()


async def test_wait_mode_confirms_a_duplicate_answer_too(tmp_path: Path) -> None:
    """A retry after NotReplicated, from another connection, is answered with
    the job stored before: it must wait for that job to reach a replica as well
    (the duplicate answer writes nothing of its own to wait for)."""
    with RedisServer(tmp_path / "primary", ["--repl-diskless-sync-delay", "0"]) as primary:
        replica = RedisServer(tmp_path / "replica", ["--replicaof", "127.0.0.1", str(primary.port)])
        with replica, redis.Redis(port=primary.port) as client:
            _replica_in_step(client)
            url = primary.url(wait_replicas="1", wait_timeout="300ms")
            first, second = RedisBackend(url), RedisBackend(url)
            await first.open()
            await second.open()
            try:
                await second.enqueue_jobs(_jobs(1))  # the second connection has written before
                assert replica.proc is not None
                replica.proc.send_signal(signal.SIGSTOP)  # a replica that stops acknowledging
                try:
                    with pytest.raises(NotReplicated):
                        await first.enqueue_jobs(_jobs(1, idempotency_key="k"))
                    with pytest.raises(NotReplicated):
                        await second.enqueue_jobs(_jobs(1, idempotency_key="k"))
                finally:
                    replica.proc.send_signal(signal.SIGCONT)
                _replica_in_step(client)
                (job,) = await second.enqueue_jobs(_jobs(1, idempotency_key="k"))
                assert job.duplicate
            finally:
                await first.close()
                await second.close()


def _replica_in_step(client: redis.Redis) -> None:
    """Until the replica has synced and acknowledges writes (a loaded host takes
    longer than a 300 ms WAIT for the first sync or a resumed replica)."""
    client.set("in-step", 1)
    assert client.execute_command("WAIT", 1, 10_000) == 1, "the replica never caught up"


async def test_scripts_come_back_after_script_flush(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "flush") as server:
        backend = RedisBackend(server.url())
        await backend.open()
        await backend.enqueue_jobs(_jobs(2))
        redis.Redis(port=server.port).script_flush()
        await backend.enqueue_jobs(_jobs(2))  # NOSCRIPT -> loaded again
        claimed = await backend.claim_jobs(ClaimRequest("w", ["default"], 10, 30.0))
        assert len(claimed.jobs) == 4
        await backend.close()


async def test_payloads_given_as_bytearray_are_stored(shared: tuple[RedisBackend, str]) -> None:
    backend, _ = shared
    (job,) = await backend.enqueue_jobs(
        [NewJob(id=new_ids(1)[0], task="t", queue="default", payload=bytearray(b'{"n": 7}'))]
    )
    (stored,) = await backend.get_jobs([job.id])
    assert stored.payload == {"n": 7}


async def test_listing_pages_through_a_large_index(shared: tuple[RedisBackend, str]) -> None:
    """Unfiltered listings walk the id index a slice at a time; purges see it all."""
    backend, _ = shared
    jobs = await backend.enqueue_jobs(_jobs(2500))
    newest_first = sorted((j.id for j in jobs), reverse=True)
    page = await backend.list_jobs(JobFilter(), limit=5, offset=1998)
    assert [j.id for j in page] == newest_first[1998:2003]
    assert await backend.count_jobs(JobFilter(task="t")) == 2500
    assert await backend.purge_jobs(JobFilter(task="t")) == 2500
    assert await backend.count_jobs(JobFilter()) == 0


class _EnqueueWhileReadingDue(RedisBackend):
    """A waiter whose read of the next due time is overtaken by an enqueue from
    another instance (and its wake-up message): the wake-up must not be lost."""

    producer: RedisBackend

    async def _next_due(self) -> float | None:
        due = await super()._next_due()
        await self.producer.enqueue_jobs(_jobs(1))
        await asyncio.sleep(0.1)  # the wake-up arrives while no waiter is registered
        return due


async def test_a_wake_up_during_the_due_time_read_is_not_lost(
    shared: tuple[RedisBackend, str], redis_url: str
) -> None:
    producer, prefix = shared
    waiter = _EnqueueWhileReadingDue(f"{redis_url}?prefix={prefix}")
    waiter.producer = producer
    await waiter.open()
    try:
        started = time.monotonic()
        await waiter.wait_for_work(["default"], 5)
        assert time.monotonic() - started < 2
    finally:
        await waiter.close()


# -- key layout --------------------------------------------------------------------------


async def test_every_key_of_an_app_is_in_one_slot(
    shared: tuple[RedisBackend, str], redis_url: str
) -> None:
    backend, prefix = shared
    await backend.configure_queue(QueueInfo("q", max_size=100, ttl=60.0))
    await backend.enqueue_jobs(
        [
            *_jobs(3, idempotency_key=None),
            NewJob(id=new_ids(1)[0], task="t", queue="q", payload=b"{}", idempotency_key="k"),
            NewJob(id=new_ids(1)[0], task="t", queue="q", payload=b"{}", delay=60),
        ]
    )
    claimed = await backend.claim_jobs(ClaimRequest("w", ["default"], 2, 30.0))
    await backend.settle_jobs(
        [Settlement(j.id, j.lease_token or "", Outcome.COMPLETE, task=j.task) for j in claimed.jobs]
    )
    client = aioredis.Redis.from_url(redis_url)
    keys = [key async for key in client.scan_iter(key_pattern(prefix))]
    await client.aclose()
    assert len(keys) > 10
    assert {key_slot(key) for key in keys} == {key_slot(backend.keys.all.encode())}


# -- memory ------------------------------------------------------------------------------


async def test_memory_per_job_is_bounded(tmp_path: Path) -> None:
    """Bytes per waiting job (100-byte payload) and per completed job kept, and
    retention giving the memory back. Figures are printed (``-s``)."""
    count = 10_000
    payload = serialization.dumps({"data": "x" * 89})
    assert len(payload) == 100
    with RedisServer(tmp_path / "memory") as server:
        client = redis.Redis(port=server.port)
        backend = RedisBackend(server.url())
        await backend.open()
        await backend.enqueue_jobs(_jobs(10))  # the fixed keys exist before the baseline
        claimed = await backend.claim_jobs(ClaimRequest("w", ["default"], 10, 30.0))
        await backend.settle_jobs(
            [Settlement(j.id, j.lease_token or "", Outcome.COMPLETE) for j in claimed.jobs]
        )
        baseline = client.info("memory")["used_memory"]
        for _ in range(count // 1000):
            await backend.enqueue_jobs(_jobs(1000, payload))
        waiting = client.info("memory")["used_memory"]
        per_waiting = (waiting - baseline) / count
        done = 0
        while done < count:
            batch = await backend.claim_jobs(ClaimRequest("w", ["default"], 500, 30.0))
            await backend.settle_jobs(
                [
                    Settlement(j.id, j.lease_token or "", Outcome.COMPLETE, result=b"null")
                    for j in batch.jobs
                ]
            )
            done += len(batch.jobs)
        completed = client.info("memory")["used_memory"]
        per_completed = (completed - baseline) / count
        pruned = await backend.prune_jobs([PruneRule(JobState.COMPLETED, max_count=100)])
        after = client.info("memory")["used_memory"]
        await backend.close()
    print(
        f"\nredis memory: {per_waiting:.0f} B per waiting job (100-byte payload), "
        f"{per_completed:.0f} B per completed job kept; after pruning to 100 kept: "
        f"{(after - baseline) / 1024:.0f} KiB above the baseline"
    )
    assert per_waiting <= 1024
    assert per_completed <= 1024
    assert pruned == count + 10 - 100
    assert after - baseline < 0.1 * (completed - baseline)

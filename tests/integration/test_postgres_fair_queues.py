"""PostgreSQL fair queues beyond the conformance suite: claimers of one fair
queue take turns (an advisory lock per fair queue) while plain claims never
wait on it, concurrent claimers keep one rotation, the batch path and the
one-pick-at-a-time path give the same jobs and state, the claim finds tenants
through jobs_fair, and maintenance prunes passes at or below vtime."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from conveyor.backends.base import ClaimRequest, NewJob, QueueInfo
from conveyor.backends.postgres import PostgresBackend
from conveyor.ids import new_id, new_token
from conveyor.ratelimit import RateLimit

FAIR = "fair"
#: How long a claim that should be waiting is given to (wrongly) finish.
BLOCKED_FOR = 0.5


@pytest.fixture
def schema() -> str:
    return f"t_{uuid.uuid4().hex}"


async def _open(url: str, schema: str) -> PostgresBackend:
    backend = PostgresBackend(f"{url}?schema={schema}")
    await backend.open()
    return backend


async def _drop(url: str, schema: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


@pytest.fixture
async def backend(postgres_url: str, schema: str) -> AsyncIterator[PostgresBackend]:
    opened = await _open(postgres_url, schema)
    try:
        yield opened
    finally:
        await opened.close()
        await _drop(postgres_url, schema)


@pytest.fixture
async def conn(postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(postgres_url)
    try:
        yield connection
    finally:
        await connection.close()


def _job(tenant: str | None, queue: str = FAIR, **options: Any) -> NewJob:
    return NewJob(id=new_id(), task="t", queue=queue, payload=b"{}", tenant=tenant, **options)


async def _make_fair(backend: PostgresBackend, weights: dict[str, float] | None = None) -> None:
    await backend.configure_queue(QueueInfo(FAIR, fairness="tenant", weights=weights or {}))


async def _claim(backend: PostgresBackend, queues: list[str], limit: int) -> list[str | None]:
    result = await backend.claim_jobs(ClaimRequest("w", queues, limit, 30.0))
    return [job.tenant for job in result.jobs]


async def test_a_fair_claim_waits_for_the_one_in_flight(
    backend: PostgresBackend, conn: asyncpg.Connection
) -> None:
    """Without the lock, the second claim would read the vtime and passes from
    before the first commits, and give "a" a second turn in a row."""
    await _make_fair(backend)
    await backend.enqueue_jobs([_job(t) for t in ("a", "b") for _ in range(3)])
    await backend.enqueue_jobs([_job("a", queue="plain") for _ in range(3)])
    transaction = conn.transaction()
    await transaction.start()
    try:
        first = await conn.fetch(
            backend.q.claim,
            *([FAIR], 1, 30.0, "raw", new_token(), None, None, None, None, None, True),
            *(None, None, None, None, None),
        )
        assert [row["tenant"] for row in first] == ["a"]
        plain = await asyncio.wait_for(_claim(backend, ["plain"], 10), 10)
        assert len(plain) == 3  # a plain claim never waits on a fair queue's lock
        second = asyncio.create_task(_claim(backend, [FAIR], 1))
        done, _ = await asyncio.wait([second], timeout=BLOCKED_FOR)
        assert not done, "the second fair claim did not wait for the first"
    finally:
        await transaction.commit()
    assert await asyncio.wait_for(second, 30) == ["b"]


async def test_many_backends_claiming_at_once_keep_one_rotation(
    postgres_url: str, schema: str, backend: PostgresBackend
) -> None:
    await _make_fair(backend)
    tenants = ["a", "b", "c", None]
    await backend.enqueue_jobs([_job(t) for t in tenants for _ in range(60)])
    others = [await _open(postgres_url, schema) for _ in range(3)]
    claimers = [backend, *others]
    try:
        got: Counter[str | None] = Counter()
        ids: list[str] = []
        for _ in range(5):
            results = await asyncio.gather(
                *(
                    b.claim_jobs(ClaimRequest(f"w{i}", [FAIR], 2, 30.0))
                    for i, b in enumerate(claimers * 3)
                )
            )
            jobs = [job for result in results for job in result.jobs]
            got.update(job.tenant for job in jobs)
            ids += [job.id for job in jobs]
        # 5 rounds x 12 claims x 2 jobs, one rotation over 4 backlogged tenants.
        assert len(ids) == len(set(ids)) == 120
        assert got == {t: 30 for t in tenants}
    finally:
        await asyncio.gather(*(b.close() for b in others))


async def _scenario(url: str, seed: int, per_pick: str | None) -> tuple[list[list[str]], list[Any]]:
    """A random fair queue and a plain one drained together by random batches;
    ``per_pick`` ("key_limits" or "key_rate_limits") adds a per-key cap or a
    per-key rate limit on a task that has no jobs, which sends the claim down
    its one-pick-at-a-time path."""
    rnd = random.Random(seed)
    schema = f"t_{uuid.uuid4().hex}"
    backend = await _open(url, schema)
    try:
        tenants: list[str | None] = [None, *(f"t{i}" for i in range(rnd.randint(1, 6)))]
        weights = {
            t: rnd.choice([0.5, 1.0, 1.5, 2.0, 3.0]) for t in tenants[1:] if rnd.random() < 0.5
        }
        await _make_fair(backend, weights)
        jobs = [
            NewJob(
                id=f"j{i:04d}",
                task="t",
                queue=FAIR,
                payload=b"{}",
                tenant=rnd.choice(tenants),
                priority=rnd.choice([0, 0, 1]),
            )
            for i in range(rnd.randint(5, 80))
        ]
        side = [
            NewJob(
                id=f"p{i:04d}", task="t", queue="side", payload=b"{}", priority=rnd.choice([0, 1])
            )
            for i in range(rnd.randint(0, 20))
        ]
        await backend.enqueue_jobs(jobs + side)
        caps = {"unrelated": 5} if per_pick == "key_limits" else {}
        rates = {"unrelated": RateLimit(5, 60.0)} if per_pick == "key_rate_limits" else {}
        batches: list[list[str]] = []
        while True:
            request = ClaimRequest(
                "w",
                [FAIR, "side"],
                rnd.randint(1, 12),
                30.0,
                key_limits=caps,
                key_rate_limits=rates,
            )
            claimed = await backend.claim_jobs(request)
            if not claimed.jobs:
                break
            batches.append(sorted(job.id for job in claimed.jobs))
            if rnd.random() < 0.3:  # a tenant arriving, or coming back
                late = NewJob(
                    f"late{len(batches):03d}", "t", FAIR, b"{}", tenant=rnd.choice(tenants)
                )
                await backend.enqueue_jobs([late])
        conn = await asyncpg.connect(url)
        try:
            state = [
                tuple(row)
                for row in await conn.fetch(
                    f'SELECT tenant, pass FROM "{schema}".fair_tenants ORDER BY tenant NULLS FIRST'
                )
            ]
            state.append(await conn.fetchval(f'SELECT vtime FROM "{schema}".queues'))
        finally:
            await conn.close()
        return batches, state
    finally:
        await backend.close()
        await _drop(url, schema)


@pytest.mark.parametrize("forced_by", ["key_limits", "key_rate_limits"])
@pytest.mark.parametrize("seed", range(10))
async def test_the_batch_path_and_the_per_pick_path_agree(
    postgres_url: str, seed: int, forced_by: str
) -> None:
    batch = await _scenario(postgres_url, seed, per_pick=None)
    per_pick = await _scenario(postgres_url, seed, per_pick=forced_by)
    assert batch[0], "the scenario claimed nothing"
    assert batch == per_pick


async def test_the_fair_claim_finds_tenants_through_jobs_fair(
    backend: PostgresBackend, postgres_url: str
) -> None:
    await _make_fair(backend)
    await backend.enqueue_jobs([_job("a") for _ in range(2000)])
    await backend.enqueue_jobs([_job("b") for _ in range(3)])
    schema = backend.options.schema
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute("LOAD 'auto_explain'")
        await conn.execute("SET auto_explain.log_min_duration = 0")
        await conn.execute("SET auto_explain.log_nested_statements = on")
        await conn.execute("SET auto_explain.log_analyze = on")
        await conn.execute("SET client_min_messages = log")
        await conn.execute("SET auto_explain.log_level = notice")
        plans: list[str] = []
        conn.add_log_listener(lambda _conn, message: plans.append(str(message)))
        async with conn.transaction():
            rows = await conn.fetch(
                f"SELECT tenant FROM \"{schema}\".claim(ARRAY['{FAIR}'], 4, 30, 'w', 't', "
                "NULL, NULL, NULL, NULL, NULL, true, NULL, NULL, NULL, NULL, NULL)"
            )
            assert sorted(row["tenant"] for row in rows) == ["a", "a", "b", "b"]
        await asyncio.sleep(0.1)
    finally:
        await conn.close()
    # The tenants' loose scan and the fetch of each one's share.
    scans = [p for p in plans if "WITH RECURSIVE" in p or ("LockRows" in p and "tenant" in p)]
    assert len(scans) >= 2, plans
    assert all("jobs_fair" in p and "Seq Scan" not in p for p in scans), scans
    # One probe per tenant: the 2,000 jobs of "a" are never walked.
    assert all("rows=2000" not in p for p in scans), scans


async def test_maintenance_prunes_passes_at_or_below_vtime(
    backend: PostgresBackend, conn: asyncpg.Connection
) -> None:
    await _make_fair(backend)
    await backend.enqueue_jobs([_job(t) for t in ("a", "b") for _ in range(2)])
    await backend.enqueue_jobs([_job("c")])
    assert Counter(await _claim(backend, [FAIR], 5)) == {"a": 2, "b": 2, "c": 1}
    schema = backend.options.schema
    rows = f'SELECT tenant, pass FROM "{schema}".fair_tenants ORDER BY tenant'
    # vtime 1 (b's second turn); c, served once at 0, has pass 1: prunable.
    assert [tuple(r) for r in await conn.fetch(rows)] == [("a", 2.0), ("b", 2.0), ("c", 1.0)]
    await backend.prune_jobs([])
    assert [tuple(r) for r in await conn.fetch(rows)] == [("a", 2.0), ("b", 2.0)]

"""PostgreSQL flow control beyond the conformance suite: how per-key caps stay
atomic across connections (claimers carrying a cap for a task take turns on
an advisory lock, claims without caps never wait on it), the capped claim's
plan, and a debounce racing a claim for the key's job."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import asyncpg
import pytest

from conveyor.backends.base import ClaimRequest, JobFilter, NewJob, Outcome, Settlement
from conveyor.backends.postgres import PostgresBackend
from conveyor.ids import new_id, new_token
from conveyor.job import JobState

CAPS = {"capped": 2}
#: How long a claim that should be waiting is given to (wrongly) finish.
BLOCKED_FOR = 0.5


@pytest.fixture
def schema() -> str:
    return f"t_{uuid.uuid4().hex}"


@pytest.fixture
async def backend(postgres_url: str, schema: str) -> AsyncIterator[PostgresBackend]:
    opened = PostgresBackend(f"{postgres_url}?schema={schema}")
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()
        conn = await asyncpg.connect(postgres_url)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


@pytest.fixture
async def conn(postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(postgres_url)
    try:
        yield connection
    finally:
        await connection.close()


def _job(key: str | None) -> NewJob:
    return NewJob(id=new_id(), task="capped", queue="default", payload=b"{}", concurrency_key=key)


async def _claim_in_open_transaction(
    conn: asyncpg.Connection, backend: PostgresBackend, key_limits: dict[str, int], limit: int
) -> list[asyncpg.Record]:
    """The backend's own claim statement, on ``conn`` inside its transaction."""
    return await conn.fetch(
        backend.q.claim,
        *(["default"], limit, 30.0, "raw", new_token(), None, None, None, None, None, True),
        list(key_limits) or None,
        list(key_limits.values()) or None,
        *(None, None, None),  # no per-key rate limits
    )


async def test_a_capped_claim_waits_for_the_one_in_flight(
    backend: PostgresBackend, conn: asyncpg.Connection
) -> None:
    """Both would count 0 active jobs of "a" (the first has not committed) and
    take 2 each without the per-task lock."""
    await backend.enqueue_jobs([_job("a") for _ in range(6)])
    transaction = conn.transaction()
    await transaction.start()
    try:
        first = await _claim_in_open_transaction(conn, backend, CAPS, 100)
        assert len(first) == 2
        second = asyncio.create_task(
            backend.claim_jobs(ClaimRequest("w", ["default"], 100, 30.0, key_limits=CAPS))
        )
        done, _ = await asyncio.wait([second], timeout=BLOCKED_FOR)
        assert not done, "the second capped claim did not wait for the first"
    finally:
        await transaction.commit()
    assert (await asyncio.wait_for(second, 30)).jobs == []


async def test_claims_without_caps_never_wait_for_a_capped_one(
    backend: PostgresBackend, conn: asyncpg.Connection
) -> None:
    await backend.enqueue_jobs([_job("a") for _ in range(6)])
    async with conn.transaction():
        # Limit 2: it locks only the rows it takes (a capped claim locks every
        # candidate it looks at until it commits, the skipped ones included).
        assert len(await _claim_in_open_transaction(conn, backend, CAPS, 2)) == 2
        free = await asyncio.wait_for(
            backend.claim_jobs(ClaimRequest("w", ["default"], 100, 30.0)), 10
        )
        assert len(free.jobs) == 4
        other = await asyncio.wait_for(
            backend.claim_jobs(ClaimRequest("w", ["default"], 100, 30.0, key_limits={"x": 1})),
            10,
        )
        assert other.jobs == []  # a cap on another task takes another lock


async def test_many_backends_claiming_at_once_keep_every_cap(
    postgres_url: str, schema: str, backend: PostgresBackend
) -> None:
    keys = ["a", "b", "c", None]
    await backend.enqueue_jobs([_job(key) for key in keys for _ in range(30)])
    others = [PostgresBackend(f"{postgres_url}?schema={schema}") for _ in range(3)]
    await asyncio.gather(*(b.open() for b in others))
    claimers = [backend, *others]
    try:
        highest: Counter[str | None] = Counter()
        for _ in range(8):
            results = await asyncio.gather(
                *(
                    b.claim_jobs(ClaimRequest(f"w{i}", ["default"], 3, 30.0, key_limits=CAPS))
                    for i, b in enumerate(claimers * 3)
                )
            )
            active = await backend.list_jobs(JobFilter(states=[JobState.ACTIVE]), limit=1000)
            running = Counter(job.concurrency_key for job in active)
            highest |= running
            assert max(running.values()) <= 2, running
            # Finish one job per key, so the next round has slots to race for.
            finished: set[str | None] = set()
            for job in (j for result in results for j in result.jobs):
                if job.concurrency_key not in finished:
                    finished.add(job.concurrency_key)
                    settled = await backend.settle_jobs(
                        [Settlement(job.id, job.lease_token or "", Outcome.COMPLETE, result=b"1")]
                    )
                    assert not settled.refused
        assert highest == {key: 2 for key in keys}
    finally:
        await asyncio.gather(*(b.close() for b in others))


async def test_the_capped_claim_walks_the_claim_index_and_counts_by_key(
    backend: PostgresBackend, postgres_url: str
) -> None:
    schema = backend.options.schema
    await backend.enqueue_jobs([_job(key) for key in ("a", "b", None) for _ in range(3)])
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute("LOAD 'auto_explain'")
        await conn.execute("SET auto_explain.log_min_duration = 0")
        await conn.execute("SET auto_explain.log_nested_statements = on")
        await conn.execute("SET client_min_messages = log")
        await conn.execute("SET auto_explain.log_level = notice")
        plans: list[str] = []
        conn.add_log_listener(lambda _conn, message: plans.append(str(message)))
        async with conn.transaction():
            rows = await conn.fetch(
                f"SELECT id FROM \"{schema}\".claim(ARRAY['default'], 50, 30, 'w', 't', "
                "NULL, NULL, NULL, NULL, NULL, true, ARRAY['capped'], ARRAY[2], NULL, NULL, NULL)"
            )
            assert len(rows) == 6
        await asyncio.sleep(0.1)
    finally:
        await conn.close()
    walks = [p for p in plans if "LockRows" in p and "unnest" in p]
    assert walks, plans
    assert all("jobs_claim" in p and "Seq Scan" not in p for p in walks), walks
    counts = [p for p in plans if "count(*)" in p and "concurrency_key" in p]
    assert any("jobs_key_active" in p for p in counts), counts  # a keyed group
    assert any("jobs_lease" in p for p in counts), counts  # the keyless group
    assert all("Seq Scan" not in p for p in counts), counts


async def test_a_debounce_racing_the_claim_of_its_job_stores_a_new_job(
    backend: PostgresBackend, conn: asyncpg.Connection
) -> None:
    """The claim locked the key's job first: the debounce waits for it, then
    finds the job active and stores a new one (the running job keeps its payload)."""
    schema = backend.options.schema
    (first,) = await backend.enqueue_jobs(
        [NewJob(id=new_id(), task="t", queue="q", payload=b'{"n": 1}', idempotency_key="k")]
    )
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.execute(f"UPDATE \"{schema}\".jobs SET state = 'active' WHERE id = $1", first.id)
        debounced = NewJob(
            id=new_id(), task="t", queue="q", payload=b'{"n": 2}', idempotency_key="k",
            debounce=5.0,
        )  # fmt: skip
        enqueue = asyncio.create_task(backend.enqueue_jobs([debounced]))
        done, _ = await asyncio.wait([enqueue], timeout=BLOCKED_FOR)
        assert not done, "the debounce did not wait for the job's row"
    finally:
        await transaction.commit()
    (second,) = await asyncio.wait_for(enqueue, 30)
    assert second.id == debounced.id
    assert not second.duplicate
    assert second.state is JobState.DELAYED
    stored = {job.id: job for job in await backend.get_jobs([first.id, second.id])}
    assert stored[first.id].payload == {"n": 1}
    assert stored[second.id].payload == {"n": 2}


async def test_a_debounce_undoes_the_jobs_dispatch(
    backend: PostgresBackend, conn: asyncpg.Connection
) -> None:
    """Its new due time is a new dispatch; the old message's dead letter is fenced off."""
    schema = backend.options.schema
    (job,) = await backend.enqueue_jobs(
        [NewJob(id=new_id(), task="t", queue="q", payload=b"{}", idempotency_key="k")]
    )
    await conn.execute(
        f'UPDATE "{schema}".jobs SET dispatched_at = run_at + 0.001 WHERE id = $1', job.id
    )
    (again,) = await backend.enqueue_jobs(
        [NewJob(id=new_id(), task="t", queue="q", payload=b"{}", idempotency_key="k", debounce=5)]
    )
    assert again.id == job.id
    assert again.duplicate
    stamp = await conn.fetchval(f'SELECT dispatched_at FROM "{schema}".jobs WHERE id = $1', job.id)
    assert stamp is None


async def test_debounces_from_many_backends_leave_one_job(
    postgres_url: str, schema: str, backend: PostgresBackend
) -> None:
    others = [PostgresBackend(f"{postgres_url}?schema={schema}") for _ in range(3)]
    await asyncio.gather(*(b.open() for b in others))
    try:

        async def one(producer: PostgresBackend, n: int) -> str:
            payload = f'{{"n": {n}}}'.encode()
            new = NewJob(
                id=new_id(), task="t", queue="q", payload=payload, idempotency_key="k",
                debounce=5.0,
            )  # fmt: skip
            (job,) = await producer.enqueue_jobs([new])
            return job.id

        producers = [backend, *others]
        ids = await asyncio.gather(*(one(producers[n % 4], n) for n in range(60)))
        assert len(set(ids)) == 1
        assert await backend.count_jobs(JobFilter(idempotency_key="k")) == 1
    finally:
        await asyncio.gather(*(b.close() for b in others))


async def test_a_dead_letter_retry_keeps_the_key(backend: PostgresBackend) -> None:
    (job,) = await backend.enqueue_jobs([_job("acct-7")])
    (claimed,) = (await backend.claim_jobs(ClaimRequest("w", ["default"], 1, 30.0))).jobs
    fail = Settlement(claimed.id, claimed.lease_token or "", Outcome.FAIL)
    assert not (await backend.settle_jobs([fail])).refused
    copy = await backend.retry_failed(job.id, new_id())
    assert copy.concurrency_key == "acct-7"
    assert (await backend.get_jobs([copy.id]))[0].concurrency_key == "acct-7"

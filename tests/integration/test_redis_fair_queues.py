"""Fair queues on Redis: a fair queue keeps its waiting jobs in per-(queue,
task, tenant) sets (``fw:``) with its candidate tenants in ``fq:<queue>``,
instead of the per-task sets (``w:``, ``wt:``). What the conformance suite
cannot see from outside: every way into ``waiting`` lands in the tenant sets,
switching a queue's fairness moves its waiting jobs, a direct handoff follows
the rule, and a drained tenant leaves the candidates with its pass kept."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis_servers import delete_prefix

from conveyor import serialization
from conveyor.backends.base import (
    ClaimRequest,
    JobFilter,
    NewJob,
    Outcome,
    QueueInfo,
    Settlement,
)
from conveyor.backends.redis import RedisBackend
from conveyor.ids import new_ids
from conveyor.job import Job, JobState

Q = "default"


def _jobs(tenant: str | None, count: int = 1, **options: object) -> list[NewJob]:
    return [
        NewJob(job_id, "t", Q, b"{}", tenant=tenant, **options)  # type: ignore[arg-type]
        for job_id in new_ids(count)
    ]


def _claim(limit: int = 1, lease: float = 30.0, **options: object) -> ClaimRequest:
    return ClaimRequest("w1", [Q], limit, lease, **options)  # type: ignore[arg-type]


async def _tenants(backend: RedisBackend, limit: int = 1, times: int = 1) -> str:
    out = ""
    for _ in range(times):
        for job in (await backend.claim_jobs(_claim(limit))).jobs:
            out += job.tenant or "-"
    return out


async def _settle(backend: RedisBackend, job: Job, outcome: Outcome, **extra: object) -> None:
    assert job.lease_token is not None
    settled = Settlement(job.id, job.lease_token, outcome, **extra)  # type: ignore[arg-type]
    assert (await backend.settle_jobs([settled])).refused == set()


async def _fair(backend: RedisBackend, fair: bool = True, **weights: float) -> None:
    await backend.configure_queue(
        QueueInfo(Q, fairness="tenant" if fair else None, weights=dict(weights))
    )


@pytest.fixture
async def prefix(redis_url: str) -> AsyncIterator[str]:
    name = f"t{uuid.uuid4().hex}"
    yield name
    await delete_prefix(redis_url, name)


@pytest.fixture
async def backend(redis_url: str, prefix: str) -> AsyncIterator[RedisBackend]:
    opened = RedisBackend(f"{redis_url}?prefix={prefix}")
    await opened.open()
    yield opened
    await opened.close()


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    opened = aioredis.Redis.from_url(redis_url)
    yield opened
    await opened.aclose()


async def _kinds(backend: RedisBackend, client: aioredis.Redis) -> set[str]:
    """The kinds of per-queue waiting keys that exist (``w``, ``wt``, ``fw``, ...)."""
    base = backend.keys.base
    found = set()
    async for key in client.scan_iter(match=backend.keys.pattern(), count=1000):
        rest = key.decode()[len(base) :]
        kind = rest.partition(":")[0]
        if kind in {"w", "wt", "fw", "ftk", "fq", "fs"}:
            found.add(kind)
    return found


async def test_fair_redis_switching_moves_waiting_jobs_both_ways(
    backend: RedisBackend, client: aioredis.Redis
) -> None:
    await backend.enqueue_jobs(_jobs("A", 6) + _jobs("B", 3))
    assert await _kinds(backend, client) == {"w", "wt"}

    await _fair(backend)
    assert await _kinds(backend, client) == {"fw", "ftk", "fq"}
    assert (await backend.queue_counts())[Q]["waiting"] == 9
    assert await backend.count_jobs(JobFilter(states=[JobState.WAITING], tenant="A")) == 6
    assert await _tenants(backend, times=4) == "ABAB"

    await _fair(backend, fair=False)
    assert await _kinds(backend, client) == {"w", "wt"}
    # Plain again: the usual order (A's jobs were enqueued first), nothing lost.
    assert await _tenants(backend, limit=10) == "AAAAB"


async def test_fair_redis_every_way_into_waiting_lands_in_the_tenant_sets(
    backend: RedisBackend, client: aioredis.Redis
) -> None:
    await _fair(backend)
    # delayed, then promoted by a claim
    await backend.enqueue_jobs(_jobs("A", delay=0.05))
    # released at shutdown, recovered after a stall, retried from the dead letters
    await backend.enqueue_jobs(_jobs("B") + _jobs("C") + _jobs("D"))
    claimed = {j.tenant: j for j in (await backend.claim_jobs(_claim(3, lease=0.5))).jobs}
    assert set(claimed) == {"B", "C", "D"}
    await _settle(backend, claimed["B"], Outcome.RELEASE)
    await _settle(backend, claimed["D"], Outcome.FAIL)
    await asyncio.sleep(0.6)
    assert len((await backend.recover_stalled(3)).requeued) == 1  # C
    await backend.retry_failed(claimed["D"].id, new_ids(1)[0])
    # released by its dependency's completion
    dependency = _jobs("E")
    await backend.enqueue_jobs(dependency + _jobs("F", depends_on=[dependency[0].id]))
    assert "w" not in await _kinds(backend, client)

    got = (await backend.claim_jobs(_claim(10))).jobs
    assert sorted(j.tenant or "" for j in got) == ["A", "B", "C", "D", "E"]
    done = next(j for j in got if j.tenant == "E")
    await _settle(backend, done, Outcome.COMPLETE, result=serialization.dumps(1))
    assert "w" not in await _kinds(backend, client)
    assert await _tenants(backend, limit=10) == "F"


async def test_fair_redis_a_handoff_follows_the_rule(
    backend: RedisBackend, client: aioredis.Redis
) -> None:
    await _fair(backend)
    await backend.enqueue_jobs(_jobs("A", 4))
    assert await _tenants(backend, limit=2) == "AA"
    # An idle worker registers; an enqueue of B's and A's jobs is claimed for it.
    idle = ClaimRequest("w2", [Q], 4, 30.0, handoff_for=5.0)
    # A's last two: the claim comes back short and registers the worker as idle.
    assert len((await backend.claim_jobs(idle)).jobs) == 2
    await backend.enqueue_jobs(_jobs("A", 3) + _jobs("B", 1))
    handed = await backend.next_handoff("w2", 1.0)
    assert handed is not None
    tenants = "".join(j.tenant or "-" for h in handed for j in h.result.jobs)
    # A took 4 passes already: B is served first, then A (the rule, not enqueue order).
    assert tenants == "BA"


async def test_fair_redis_a_drained_tenant_leaves_the_candidates_keeping_its_pass(
    backend: RedisBackend, client: aioredis.Redis
) -> None:
    await _fair(backend)
    await backend.enqueue_jobs(_jobs("A", 3) + _jobs("B", 1))
    assert await _tenants(backend, limit=4) == "ABAA"
    fq = backend.keys.fair_tenants(Q)
    # B's last claim found it empty on the next look; A was drained last.
    await backend.claim_jobs(_claim(1))
    assert await client.zcard(fq) == 0
    await backend.enqueue_jobs(_jobs("A", 2) + _jobs("B", 2))
    # A kept its pass (3), ahead of vtime (2), where B rejoins: B, then A (a tie
    # at 3, won by name), then B.
    assert await _tenants(backend, limit=4) == "BABA"


async def test_fair_redis_waiting_listings_and_counts_see_the_tenant_sets(
    backend: RedisBackend,
) -> None:
    await _fair(backend, A=2.0)
    await backend.enqueue_jobs(_jobs("A", 3) + _jobs(None, 2))
    await backend.enqueue_jobs(_jobs("B", 1, delay=60))
    assert (await backend.list_queues())[0].weights == {"A": 2.0}
    assert len(await backend.oldest_waiting()) == 1
    counts = {c.tenant: (c.waiting, c.active) for c in await backend.tenant_counts(Q)}
    assert counts == {"A": (3, 0), None: (2, 0), "B": (1, 0)}
    await backend.claim_jobs(_claim(2))
    counts = {c.tenant: (c.waiting, c.active) for c in await backend.tenant_counts(Q)}
    assert counts == {"A": (2, 1), None: (1, 1), "B": (1, 0)}
    assert [t.tenant for t in await backend.tenant_counts(Q, limit=1)] == ["A"]


async def test_fair_redis_a_head_taken_from_its_set_but_not_claimed_goes_back(
    backend: RedisBackend,
) -> None:
    # A fair queue's head is taken from its tenant set as the claim looks at it;
    # here a plain queue's job of higher priority uses the task's only slot.
    await _fair(backend)
    await backend.enqueue_jobs(_jobs("A", 2))
    await backend.enqueue_jobs([NewJob(new_ids(1)[0], "t", "plain", b"{}", priority=5)])
    request = ClaimRequest("w1", [Q, "plain"], 5, 30.0, task_limits={"t": 1})
    got = (await backend.claim_jobs(request)).jobs
    assert [j.queue for j in got] == ["plain"]
    assert await backend.count_jobs(JobFilter(states=[JobState.WAITING], queue=Q)) == 2
    assert await _tenants(backend, limit=5) == "AA"


async def test_fair_redis_a_tenant_with_several_tasks_takes_its_first_claimable_job(
    backend: RedisBackend,
) -> None:
    await _fair(backend)
    first, second, third = new_ids(3)
    await backend.enqueue_jobs(
        [
            NewJob(first, "t", Q, b"{}", tenant="A"),
            NewJob(second, "u", Q, b"{}", tenant="A", priority=1),
            NewJob(third, "t", Q, b"{}", tenant="B"),
        ]
    )
    # u blocked by its cap: A's first claimable job is t's, then B's turn.
    request = ClaimRequest("w1", [Q], 2, 30.0, task_limits={"u": 0})
    assert [j.id for j in (await backend.claim_jobs(request)).jobs] == [first, third]
    assert [j.id for j in (await backend.claim_jobs(_claim(5))).jobs] == [second]


async def test_fair_redis_jobs_popped_but_not_claimed_keep_their_order(
    backend: RedisBackend,
) -> None:
    # A tenant served several times in one claim has its set popped ahead
    # (1, 2, 4 ... jobs); what the claim does not take goes back in place.
    await _fair(backend)
    jobs = [
        NewJob(job_id, "t", Q, b"{}", tenant="A", priority=n % 3)
        for n, job_id in enumerate(new_ids(10))
    ]
    await backend.enqueue_jobs(jobs)
    usual = [j.id for j in sorted(jobs, key=lambda j: (-j.priority, j.id))]
    first = [j.id for j in (await backend.claim_jobs(_claim(4))).jobs]
    assert first == usual[:4]
    waiting = JobFilter(states=[JobState.WAITING], queue=Q)
    assert await backend.count_jobs(waiting) == 6
    rest = [j.id for j in (await backend.claim_jobs(_claim(10))).jobs]
    assert rest == usual[4:]

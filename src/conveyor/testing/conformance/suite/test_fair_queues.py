"""Fair queues: weighted round-robin across tenants (the rule in ``backends/base.py``).

Orders are exact where the rule makes them so: with vtime 0 and no passes,
ties go to the tenant name first (``None`` before every name).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

from conveyor.backends.base import Backend, Outcome, QueueInfo
from conveyor.ids import new_id
from conveyor.job import Job
from conveyor.ratelimit import RateLimit

from .helpers import again_when_late, claim, enqueue, error, new_job, ran_before, settle_ok

FAIR = "fair"


async def make_fair(
    backend: Backend, weights: dict[str, float] | None = None, queue: str = FAIR
) -> None:
    await backend.configure_queue(QueueInfo(queue, fairness="tenant", weights=weights or {}))


async def backlog(
    backend: Backend,
    tenant: str | None,
    count: int,
    queue: str = FAIR,
    start: float = 0.0,
    **options: Any,
) -> list[Job]:
    """``count`` due jobs of ``tenant``, run_at strictly increasing from ``start``
    seconds in the past (so the usual order within the tenant is the list's)."""
    now = await backend.now()
    jobs = [
        new_job(queue=queue, tenant=tenant, run_at=now - 1000 + start + i * 0.001, **options)
        for i in range(count)
    ]
    stored: list[Job] = []
    for chunk in range(0, len(jobs), 500):
        stored += await enqueue(backend, *jobs[chunk : chunk + 500])
    return stored


async def take(
    backend: Backend, times: int, queues: Sequence[str] = (FAIR,), **opts: Any
) -> list[Job]:
    """``times`` claims of one job each, in order; stops at the first empty claim."""
    taken: list[Job] = []
    for _ in range(times):
        jobs = (await claim(backend, queues, limit=1, **opts)).jobs
        if not jobs:
            break
        taken.append(jobs[0])
    return taken


def tenants(jobs: Sequence[Job]) -> list[str | None]:
    return [job.tenant for job in jobs]


async def test_fair_alternates_between_backlogged_tenants(backend: Backend) -> None:
    await make_fair(backend)
    await backlog(backend, "a", 6)
    await backlog(backend, "b", 3, start=100)
    taken = await take(backend, 10)
    assert tenants(taken) == ["a", "b", "a", "b", "a", "b", "a", "a", "a"]


async def test_fair_weights_follow_the_worked_example(backend: Backend) -> None:
    await make_fair(backend, {"a": 3})
    await backlog(backend, "a", 20)
    await backlog(backend, "b", 20)
    taken = await take(backend, 10)
    assert "".join(t or "-" for t in tenants(taken)) == "abaaabaaab"


async def test_fair_weighted_shares_over_4000_claims(backend: Backend) -> None:
    await make_fair(backend, {"a": 3, "c": 2})
    await backlog(backend, "a", 2500)
    await backlog(backend, "b", 1000)
    await backlog(backend, "c", 1700)
    got: Counter[str | None] = Counter()
    for _ in range(40):
        got.update(tenants((await claim(backend, [FAIR], limit=100)).jobs))
    assert sum(got.values()) == 4000
    for tenant, share in (("a", 3 / 6), ("b", 1 / 6), ("c", 2 / 6)):
        expected = 4000 * share
        assert abs(got[tenant] - expected) <= 0.1 * expected, (tenant, got)


async def test_fair_priority_orders_jobs_within_a_tenant(backend: Backend) -> None:
    await make_fair(backend)
    low, high, mid = await backlog(backend, "a", 3, priority=0)
    await backend.delete_jobs([high.id, mid.id])
    now = await backend.now()
    high, mid = await enqueue(
        backend,
        new_job(queue=FAIR, tenant="a", priority=5, run_at=now - 10),
        new_job(queue=FAIR, tenant="a", priority=1, run_at=now - 10),
    )
    (urgent,) = await enqueue(backend, new_job(queue=FAIR, tenant="b", priority=9))
    taken = await take(backend, 5)
    # The rotation picks the tenant; priority only orders the tenant's own jobs.
    assert [job.id for job in taken] == [high.id, urgent.id, mid.id, low.id]


async def test_fair_batch_claim_interleaves_tenants(backend: Backend) -> None:
    await make_fair(backend)
    for offset, tenant in enumerate("abc"):
        await backlog(backend, tenant, 10, start=offset * 100)
    batch = (await claim(backend, [FAIR], limit=9)).jobs
    assert Counter(tenants(batch)) == {"a": 3, "b": 3, "c": 3}


async def test_fair_weighted_batch_claim(backend: Backend) -> None:
    await make_fair(backend, {"a": 3})
    await backlog(backend, "a", 20)
    await backlog(backend, "b", 20, start=100)
    batch = (await claim(backend, [FAIR], limit=10)).jobs
    assert Counter(tenants(batch)) == {"a": 7, "b": 3}
    # The batch's turns are stored: the next claims go on from there.
    assert tenants(await take(backend, 4)) == ["a", "a", "a", "b"]


async def test_fair_idle_tenant_rejoins_at_virtual_time(backend: Backend) -> None:
    await make_fair(backend)
    await backlog(backend, "a", 30)
    await backlog(backend, "b", 1, start=100)
    assert tenants(await take(backend, 12)) == ["a", "b"] + ["a"] * 10
    # b was idle while a ran alone: it earned no credit, so no burst of b.
    await backlog(backend, "b", 5, start=200)
    assert tenants(await take(backend, 6)) == ["b", "a", "b", "a", "b", "a"]


async def test_fair_new_tenant_is_served_within_one_round(backend: Backend) -> None:
    await make_fair(backend)
    await backlog(backend, "a", 30)
    await backlog(backend, "b", 30, start=100)
    assert len(await take(backend, 20)) == 20
    await backlog(backend, "c", 5, start=200)
    assert tenants(await take(backend, 6)) == ["c", "a", "b", "c", "a", "b"]


async def test_fair_many_tenants_take_turns_in_name_order(backend: Backend) -> None:
    await make_fair(backend, {"t07": 2})
    names = [f"t{i:02d}" for i in range(40)]
    for offset, tenant in enumerate(reversed(names)):  # enqueue order does not matter
        await backlog(backend, tenant, 4, start=offset * 10)
    taken = await take(backend, 41)
    # Everyone stands at vtime 0 until served once; t07 (weight 2) then comes
    # back at 0.5, before the others' second turns at 1.
    assert tenants(taken) == [*names, "t07"]
    batches = [Counter(tenants((await claim(backend, [FAIR], limit=7)).jobs)) for _ in range(6)]
    # The next 42: the second round in name order, t07's extra turn, then t00.
    assert all(max(batch.values()) == 1 for batch in batches)
    total = sum(batches, Counter())
    assert total == {**dict.fromkeys(names, 1), "t07": 2, "t00": 2}


async def test_fair_none_is_a_tenant_sorted_first(backend: Backend) -> None:
    await make_fair(backend)
    await backlog(backend, "a", 3)
    await backlog(backend, None, 3, start=100)
    assert tenants(await take(backend, 6)) == [None, "a", None, "a", None, "a"]


async def test_fair_skips_a_tenant_held_by_its_key_cap(backend: Backend) -> None:
    await make_fair(backend)
    await backlog(backend, "a", 5, concurrency_key="k-a")
    await backlog(backend, "b", 5, start=100, concurrency_key="k-b")
    caps = {"t": 1}
    first = await take(backend, 1, key_limits=caps)
    assert tenants(first) == ["a"]
    assert tenants(await take(backend, 1, key_limits=caps)) == ["b"]
    # Both keys are full now: nothing more until a slot comes back.
    assert await take(backend, 1, key_limits=caps) == []
    await settle_ok(backend, first[0], Outcome.COMPLETE)
    assert tenants(await take(backend, 1, key_limits=caps)) == ["a"]


async def test_fair_blocked_tenant_earns_no_credit(backend: Backend) -> None:
    await make_fair(backend)
    await backlog(backend, "a", 5, concurrency_key="k-a")
    await backlog(backend, "b", 10, start=100, task="uncapped")
    caps = {"t": 1}
    held = await take(backend, 1, key_limits=caps)
    assert tenants(held) == ["a"]
    assert tenants(await take(backend, 4, key_limits=caps)) == ["b"] * 4
    await settle_ok(backend, held[0], Outcome.COMPLETE)
    # a was skipped while capped, not owed: it alternates again, no burst.
    assert tenants(await take(backend, 4, key_limits=caps)) == ["a", "b", "b", "b"]


async def test_fair_skips_a_tenant_over_its_rate_limit(backend: Backend) -> None:
    await make_fair(backend)
    await backlog(backend, "a", 5, task="limited")
    await backlog(backend, "b", 5, start=100)
    limits = {"limited": RateLimit(1, 60.0)}
    assert tenants(await take(backend, 4, rate_limits=limits)) == ["a", "b", "b", "b"]


async def test_fair_skips_a_tenant_whose_task_has_no_slot(backend: Backend) -> None:
    await make_fair(backend)
    await backlog(backend, "a", 5, task="busy")
    await backlog(backend, "b", 5, start=100)
    taken = (await claim(backend, [FAIR], limit=5, task_limits={"busy": 1})).jobs
    assert Counter(tenants(taken)) == {"a": 1, "b": 4}


async def test_fair_not_due_jobs_make_no_candidate(backend: Backend) -> None:
    await make_fair(backend)
    await enqueue(backend, *[new_job(queue=FAIR, tenant="a", delay=60) for _ in range(3)])
    await backlog(backend, "b", 3)
    assert tenants(await take(backend, 4)) == ["b", "b", "b"]


async def test_fair_paused_queue_yields_nothing(backend: Backend) -> None:
    await make_fair(backend)
    await backlog(backend, "a", 2)
    await backlog(backend, "b", 2, start=100)
    await backend.set_queue_paused(FAIR, True)
    assert (await claim(backend, [FAIR])).jobs == []
    await backend.set_queue_paused(FAIR, False)
    assert tenants(await take(backend, 4)) == ["a", "b", "a", "b"]


async def test_fair_plain_queue_keeps_the_usual_order(backend: Backend) -> None:
    await backlog(backend, "a", 3, queue="plain")
    await backlog(backend, "b", 3, queue="plain", start=100)
    taken = await take(backend, 6, queues=["plain"])
    assert tenants(taken) == ["a", "a", "a", "b", "b", "b"]


async def test_fair_claim_over_several_queues_merges_by_head(backend: Backend) -> None:
    await make_fair(backend)
    now = await backend.now()
    a1, a2, a3, b1, p1, p2 = await enqueue(
        backend,
        new_job(queue=FAIR, tenant="a", run_at=now - 100),
        new_job(queue=FAIR, tenant="a", run_at=now - 89),
        new_job(queue=FAIR, tenant="a", run_at=now - 88),
        new_job(queue=FAIR, tenant="b", run_at=now - 80),
        new_job(queue="plain", tenant="a", run_at=now - 85),
        new_job(queue="plain", tenant="a", run_at=now - 75),
    )
    taken = await take(backend, 7, queues=[FAIR, "plain"])
    # fair's own order is a1 b1 a2 a3; plain's p1 p2; merged by the heads' run_at.
    assert [job.id for job in taken] == [a1.id, p1.id, b1.id, a2.id, a3.id, p2.id]


async def test_fair_released_job_goes_back_to_its_tenant(backend: Backend) -> None:
    await make_fair(backend)
    await backlog(backend, "a", 3)
    await backlog(backend, "b", 3, start=100)
    (first,) = await take(backend, 1)
    await settle_ok(backend, first, Outcome.RELEASE)
    again = await take(backend, 2)
    assert tenants(again) == ["b", "a"]
    assert again[1].id == first.id


async def test_fair_retried_job_rejoins_its_tenant(backend: Backend) -> None:
    await make_fair(backend)
    await backlog(backend, "a", 1, max_attempts=3)
    (first,) = await take(backend, 1)
    await settle_ok(backend, first, Outcome.RETRY, retry_delay=0.0)
    await backlog(backend, "b", 2, start=100)
    # Whether the retry is due at once or a moment later, it comes back as a's.
    got = []
    for _ in range(50):
        got += await take(backend, 3)
        if len(got) >= 3:
            break
    assert first.id in [job.id for job in got]
    assert Counter(tenants(got)) == {"a": 1, "b": 2}


async def test_fair_switching_a_queue_to_fair_applies_to_waiting_jobs(backend: Backend) -> None:
    await backlog(backend, "a", 4)
    await backlog(backend, "b", 2, start=100)
    await make_fair(backend)
    assert tenants(await take(backend, 6)) == ["a", "b", "a", "b", "a", "a"]
    await backlog(backend, "a", 2, start=200)
    await backlog(backend, "b", 2, start=300)
    await backend.configure_queue(QueueInfo(FAIR))
    assert tenants(await take(backend, 4)) == ["a", "a", "b", "b"]


async def test_fair_switch_reaches_jobs_in_every_state(backend: Backend) -> None:
    # Jobs stored while the queue was plain -- running, failed -- join their
    # tenants once it is fair: a release and a dead-letter retry are fair.
    (running,) = await backlog(backend, "a", 1)
    (dead,) = await backlog(backend, "c", 1, start=1, max_attempts=1)
    first, second = await take(backend, 2)
    assert (first.id, second.id) == (running.id, dead.id)
    await settle_ok(backend, second, Outcome.FAIL, error=error())
    await backlog(backend, "a", 3, start=10)
    await backlog(backend, "b", 1, start=100)
    await make_fair(backend)
    await settle_ok(backend, first, Outcome.RELEASE)
    copy = await backend.retry_failed(dead.id, new_id())
    got = await take(backend, 6)
    assert tenants(got[:3]) == ["a", "b", "c"]
    assert {running.id, copy.id} <= {job.id for job in got}
    assert len(got) == 6
    # And back: a plain queue again takes its jobs in the usual order.
    await backend.configure_queue(QueueInfo(FAIR))
    await backlog(backend, "b", 2, start=200)
    await backlog(backend, "a", 1, start=300)
    assert tenants(await take(backend, 3)) == ["b", "b", "a"]


async def test_fair_configure_queue_round_trip(backend: Backend) -> None:
    await backend.configure_queue(
        QueueInfo(FAIR, max_size=50, ttl=9.0, fairness="tenant", weights={"org-1": 3.0})
    )
    (info,) = [q for q in await backend.list_queues() if q.name == FAIR]
    assert (info.max_size, info.ttl, info.fairness, info.weights) == (
        50,
        9.0,
        "tenant",
        {"org-1": 3.0},
    )
    assert info.to_dict()["weights"] == {"org-1": 3.0}
    await backend.configure_queue(QueueInfo(FAIR, fairness="tenant", weights={"x": 0.5}))
    (info,) = [q for q in await backend.list_queues() if q.name == FAIR]
    assert (info.max_size, info.fairness, info.weights) == (None, "tenant", {"x": 0.5})
    await backend.configure_queue(QueueInfo(FAIR))
    (info,) = [q for q in await backend.list_queues() if q.name == FAIR]
    assert (info.fairness, info.weights) == (None, {})


async def test_fair_configure_queue_keeps_paused(backend: Backend) -> None:
    await backend.set_queue_paused(FAIR, True)
    await backend.configure_queue(QueueInfo(FAIR, paused=False, fairness="tenant"))
    (info,) = [q for q in await backend.list_queues() if q.name == FAIR]
    assert (info.paused, info.fairness) == (True, "tenant")


async def test_fair_tenant_counts(backend: Backend) -> None:
    await make_fair(backend)
    await backlog(backend, "a", 4)
    await backlog(backend, "b", 2, start=100)
    await backlog(backend, None, 2, start=200)
    await enqueue(backend, new_job(queue=FAIR, tenant="c", delay=60))
    (gone,) = await backlog(backend, "e", 1, start=300, delay=60)
    await backend.cancel_job(gone.id)
    await enqueue(backend, new_job(queue="other", tenant="a"))
    running = (await claim(backend, [FAIR], limit=3)).jobs
    assert Counter(tenants(running)) == {"a": 1, "b": 1, None: 1}
    (no_tenant,) = [job for job in running if job.tenant is None]
    await settle_ok(backend, no_tenant, Outcome.COMPLETE)

    counts = await backend.tenant_counts(FAIR)
    # Most waiting first; then most active; then by name, None first.
    assert [(c.tenant, c.waiting, c.active) for c in counts] == [
        ("a", 3, 1),
        ("b", 1, 1),
        (None, 1, 0),
        ("c", 1, 0),
    ]
    assert [c.tenant for c in await backend.tenant_counts(FAIR, limit=2)] == ["a", "b"]
    assert await backend.tenant_counts("nothing-here") == []


async def test_fair_turns_are_shared_between_instances(
    backend_pair: tuple[Backend, Backend],
) -> None:
    first, second = backend_pair
    await make_fair(first)
    await backlog(first, "a", 5)
    await backlog(first, "b", 5, start=100)
    assert tenants(await take(first, 1)) == ["a"]
    # The second instance (another worker, or the store reopened) goes on from
    # the stored turn: b, not a again.
    assert tenants(await take(second, 1)) == ["b"]
    assert tenants(await take(first, 1)) == ["a"]
    assert tenants(await take(second, 1)) == ["b"]


# -- with rate limits per key (key_rate_limits) ---------------------------------

#: Two starts per rate_limit_key per second, for the test that waits for a window.
KEY_RATES = {"keyed": RateLimit(2, 1.0)}
#: Two starts per rate_limit_key per minute: windows that stay spent for the test.
KEY_RATES_HELD = {"keyed": RateLimit(2, 60.0)}


@again_when_late
async def test_fair_skips_a_tenant_whose_rate_key_window_is_spent(backend: Backend) -> None:
    await make_fair(backend)
    await backlog(backend, "a", 6, task="keyed", rate_limit_key="k-a")
    await backlog(backend, "b", 6, start=100)
    started = await backend.now()
    taken = await take(backend, 5, key_rate_limits=KEY_RATES)
    await ran_before(backend, started + 1.0, "the claims inside a's window")
    # a's window holds its two starts: a is passed over and b is served.
    assert tenants(taken) == ["a", "b", "a", "b", "b"]
    await asyncio.sleep(1.1)
    # The window freed: the rotation goes on from the stored turns (a at pass 2,
    # b at 3, vtime 2), a taking what its window admits again.
    resumed = await backend.now()
    after = await take(backend, 5, key_rate_limits=KEY_RATES)
    await ran_before(backend, resumed + 1.0, "the claims after the window freed")
    assert tenants(after) == ["a", "a", "b", "b", "b"]


async def test_fair_batch_claim_passes_spent_rate_key_windows(backend: Backend) -> None:
    await make_fair(backend)
    await backlog(backend, "a", 6, task="keyed", rate_limit_key="k-a")
    await backlog(backend, "b", 6, start=100, task="keyed", rate_limit_key="k-b")
    await backlog(backend, "c", 6, start=200)
    first = (await claim(backend, [FAIR], limit=8, key_rate_limits=KEY_RATES_HELD)).jobs
    # a b c a b c, then a's and b's windows are spent: c takes the rest.
    assert Counter(tenants(first)) == {"a": 2, "b": 2, "c": 4}
    second = (await claim(backend, [FAIR], limit=8, key_rate_limits=KEY_RATES_HELD)).jobs
    assert Counter(tenants(second)) == {"c": 2}


async def test_fair_tenant_goes_on_with_its_next_rate_key(backend: Backend) -> None:
    await make_fair(backend)
    await backlog(backend, "a", 4, task="keyed", rate_limit_key="k-1")
    await backlog(backend, "a", 2, start=50, task="keyed", rate_limit_key="k-2")
    await backlog(backend, "b", 6, start=100)
    taken = await take(backend, 8, key_rate_limits=KEY_RATES_HELD)
    # a's first claimable job lies past its spent window: a keeps its turns.
    assert tenants(taken) == ["a", "b", "a", "b", "a", "b", "a", "b"]
    assert [j.rate_limit_key for j in taken if j.tenant == "a"] == ["k-1", "k-1", "k-2", "k-2"]
    assert tenants(await take(backend, 3, key_rate_limits=KEY_RATES_HELD)) == ["b", "b"]


async def test_fair_and_plain_queue_pass_spent_rate_key_windows(backend: Backend) -> None:
    await make_fair(backend)
    await backlog(backend, "a", 4, task="keyed", rate_limit_key="k-a")
    await backlog(backend, "b", 2, start=100)
    await enqueue(backend, *(new_job("keyed", "side", rate_limit_key="k-s") for _ in range(4)))
    got = (await claim(backend, [FAIR, "side"], limit=20, key_rate_limits=KEY_RATES_HELD)).jobs
    assert Counter((job.queue, job.tenant, job.rate_limit_key) for job in got) == {
        (FAIR, "a", "k-a"): 2,
        (FAIR, "b", None): 2,
        ("side", None, "k-s"): 2,
    }

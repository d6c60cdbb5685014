"""Flow-control reads for the surfaces: jobs per ``(task, concurrency_key)``
(``key_counts``) and starts per ``(task, rate_limit_key)`` window
(``rate_key_usage``), ranked and bounded by ``limit``."""

from __future__ import annotations

import asyncio

from conveyor.backends.base import Backend, KeyCount, Outcome, QueueInfo, RateKeyUse
from conveyor.ratelimit import RateLimit

from .helpers import claim, enqueue_one, new_job, settle_ok

CAPS = {"capped": 1}


async def _running_one_per_key(backend: Backend) -> None:
    """capped: keys a x3, b x1, none x2, one of each claimed under a cap of 1;
    free (not capped): key z x2, one claimed, and a keyless one claimed."""
    jobs = [new_job("capped", concurrency_key=k) for k in ("a", "a", "a", "b", None, None)]
    jobs += [new_job("free", concurrency_key="z"), new_job("free", concurrency_key="z")]
    jobs.append(new_job("free"))
    await backend.enqueue_jobs(jobs)
    result = await claim(backend, limit=100, key_limits={**CAPS, "free": 1})
    assert len(result.jobs) == 5


async def test_flow_key_counts_active_and_waiting_per_group(backend: Backend) -> None:
    await _running_one_per_key(backend)
    assert await backend.key_counts(["capped"]) == [
        KeyCount("capped", "a", 1, 2),
        KeyCount("capped", None, 1, 1),
        KeyCount("capped", "b", 1, 0),
        KeyCount("free", "z", 1, None),  # keyed and running: shown, waiting not counted
    ]


async def test_flow_key_counts_limit_keeps_the_busiest(backend: Backend) -> None:
    await _running_one_per_key(backend)
    await backend.enqueue_jobs([new_job("capped", concurrency_key="w") for _ in range(4)])
    assert await backend.key_counts(["capped"], limit=2) == [
        KeyCount("capped", "a", 1, 2),
        KeyCount("capped", None, 1, 1),
    ]
    assert await backend.key_counts(["capped"], limit=0) == []
    # A group with only waiting jobs ranks behind every running one.
    assert (await backend.key_counts(["capped"]))[-1] == KeyCount("capped", "w", 0, 4)


async def test_flow_key_counts_follow_settlements(backend: Backend) -> None:
    job = await enqueue_one(backend, "capped", concurrency_key="solo")
    (running,) = (await claim(backend, limit=1, key_limits=CAPS)).jobs
    assert await backend.key_counts(["capped"]) == [KeyCount("capped", "solo", 1, 0)]
    await settle_ok(backend, running, Outcome.COMPLETE)
    assert running.id == job.id
    assert await backend.key_counts(["capped"]) == []


async def test_flow_key_counts_leave_out_delayed_and_unasked_waiting(backend: Backend) -> None:
    await enqueue_one(backend, "capped", concurrency_key="later", delay=60.0)
    await enqueue_one(backend, "free", concurrency_key="z")
    assert await backend.key_counts(["capped"]) == []
    assert await backend.key_counts([]) == []


async def test_flow_key_counts_waiting_in_a_fair_queue(backend: Backend) -> None:
    await backend.configure_queue(QueueInfo("fair", fairness="tenant"))
    await backend.enqueue_jobs(
        [
            new_job("capped", "fair", concurrency_key="k", tenant=tenant)
            for tenant in ("t1", "t1", "t2", None)
        ]
    )
    await claim(backend, queues=["fair"], limit=100, key_limits=CAPS)
    assert await backend.key_counts(["capped"]) == [KeyCount("capped", "k", 1, 3)]


async def test_flow_rate_key_usage_counts_starts_per_window(backend: Backend) -> None:
    rates = {"keyed": RateLimit(3, 60.0)}
    await backend.enqueue_jobs(
        [new_job("keyed", rate_limit_key=k) for k in ("a",) * 5 + ("b",) + (None, None)]
    )
    assert len((await claim(backend, limit=100, key_rate_limits=rates)).jobs) == 6
    assert await backend.rate_key_usage(rates) == [
        RateKeyUse("keyed", "a", 3),
        RateKeyUse("keyed", None, 2),
        RateKeyUse("keyed", "b", 1),
    ]
    assert await backend.rate_key_usage(rates, limit=1) == [RateKeyUse("keyed", "a", 3)]
    assert await backend.rate_key_usage({"other": RateLimit(3, 60.0)}) == []
    assert await backend.rate_key_usage({}) == []


async def test_flow_rate_key_usage_counts_only_the_current_window(backend: Backend) -> None:
    claimed = {"keyed": RateLimit(5, 60.0)}
    await backend.enqueue_jobs([new_job("keyed", rate_limit_key="a") for _ in range(2)])
    await claim(backend, limit=100, key_rate_limits=claimed)
    # The same log read with a shorter period: the starts have left that window.
    await asyncio.sleep(0.3)
    assert await backend.rate_key_usage({"keyed": RateLimit(5, 0.2)}) == []
    assert await backend.rate_key_usage(claimed) == [RateKeyUse("keyed", "a", 2)]


async def test_flow_rate_key_usage_keys_with_colons_and_task_prefixes(backend: Backend) -> None:
    rates = {"send": RateLimit(9, 60.0), "send:x": RateLimit(9, 60.0)}
    await backend.enqueue_jobs(
        [new_job("send", rate_limit_key="x:y"), new_job("send:x", rate_limit_key="y")]
    )
    await claim(backend, limit=100, key_rate_limits=rates)
    assert await backend.rate_key_usage(rates) == [
        RateKeyUse("send", "x:y", 1),
        RateKeyUse("send:x", "y", 1),
    ]
    assert await backend.rate_key_usage({"send": rates["send"]}) == [RateKeyUse("send", "x:y", 1)]


async def test_flow_key_counts_a_backlog_over_many_reads(backend: Backend) -> None:
    # Past one read's slice (Redis reads a waiting set 1,000 members at a time).
    keys = ("a", "b", None)
    await backend.enqueue_jobs(
        [new_job("capped", concurrency_key=keys[i % 3]) for i in range(2_101)]
    )
    assert await backend.key_counts(["capped"]) == [
        KeyCount("capped", "a", 0, 701),
        KeyCount("capped", None, 0, 700),
        KeyCount("capped", "b", 0, 700),
    ]

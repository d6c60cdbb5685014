"""Flow control through the app and a worker: per-key concurrency (the key from
the tenant, a function of the payload, or the enqueue), a task-wide cap, and
debounce; bad options get clear errors and store nothing."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from worker_fixtures import Stack, running, settled

from conveyor import JobState
from conveyor.backends.base import ClaimRequest
from conveyor.context import JobContext
from conveyor.errors import ConcurrencyKeyError
from conveyor.flow import KeyUsage, RateUsage
from conveyor.ratelimit import RateLimit
from conveyor.task import Handler


class KeyGauge:
    """Handlers running at once per key, and each key's peak."""

    def __init__(self) -> None:
        self.now: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()

    async def hold(self, key: str, seconds: float = 0.03) -> None:
        self.now[key] += 1
        self.peak[key] = max(self.peak[key], self.now[key])
        try:
            await asyncio.sleep(seconds)
        finally:
            self.now[key] -= 1


async def test_a_function_of_the_payload_keys_the_cap(stack: Stack) -> None:
    app = stack.app()
    gauge = KeyGauge()

    @app.task("sync", key_concurrency=2, concurrency_key=lambda payload: payload["account"])
    async def sync(ctx: JobContext, account: str) -> None:
        await gauge.hold(account)

    jobs = [await sync.enqueue(account=f"acct-{n % 3}") for n in range(24)]
    assert {job.concurrency_key for job in jobs} == {"acct-0", "acct-1", "acct-2"}
    async with running(app, concurrency=20):
        for job in jobs:
            assert (await settled(job)).state is JobState.COMPLETED
    assert gauge.peak == {"acct-0": 2, "acct-1": 2, "acct-2": 2}


async def test_two_workers_share_the_cap(stack: Stack) -> None:
    first, second = stack.app(), stack.app()
    gauge = KeyGauge()
    for app in (first, second):

        @app.task("per-tenant", key_concurrency=1, concurrency_key="tenant")
        async def per_tenant(ctx: JobContext) -> None:
            await gauge.hold(ctx.job.tenant or "")

    jobs = [await first.enqueue("per-tenant", tenant=f"org-{n % 2}") for n in range(12)]
    async with running(first, concurrency=10), running(second, concurrency=10):
        for job in jobs:
            assert (await settled(job)).state is JobState.COMPLETED
    assert gauge.peak == {"org-0": 1, "org-1": 1}


async def test_without_a_key_the_cap_is_task_wide(stack: Stack) -> None:
    app = stack.app()
    gauge = KeyGauge()

    @app.task("global", key_concurrency=3)
    async def global_task(ctx: JobContext) -> None:
        await gauge.hold("all")

    jobs = [await global_task.enqueue() for _ in range(15)]
    async with running(app, concurrency=20):
        for job in jobs:
            await settled(job)
    assert gauge.peak["all"] == 3


async def test_the_enqueue_sets_the_key(stack: Stack) -> None:
    app = stack.app()

    @app.task("capped", key_concurrency=1, concurrency_key=lambda payload: "from-task")
    async def capped(ctx: JobContext) -> None: ...

    job = await app.enqueue("capped", concurrency_key="acct-42")
    assert job.concurrency_key == "acct-42"
    assert (await app.get_job(job.id)).concurrency_key == "acct-42"  # type: ignore[union-attr]


async def test_a_class_handler_keys_by_a_plain_method(stack: Stack) -> None:
    app = stack.app()

    class Sync(Handler):
        name = "sync"
        key_concurrency = 2

        def concurrency_key(payload: dict[str, Any]) -> str:  # type: ignore[misc]
            return str(payload["account"])

        async def process(self, ctx: JobContext, payload: Any) -> None: ...

    app.register(Sync())
    job = await app.enqueue("sync", {"account": "a-1"})
    assert job.concurrency_key == "a-1"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"key_concurrency": 0}, "key_concurrency must be an integer >= 1"),
        ({"key_concurrency": True}, "key_concurrency must be an integer >= 1"),
        ({"concurrency_key": "tenant"}, "concurrency_key needs key_concurrency"),
        ({"key_concurrency": 2, "concurrency_key": "account"}, "must be 'tenant' or a function"),
        ({"debounce": "0s"}, "debounce must be"),
    ],
)
async def test_bad_task_options_are_refused(
    stack: Stack, options: dict[str, Any], message: str
) -> None:
    app = stack.app()
    with pytest.raises(ValueError, match=message):
        app.task("bad", **options)


async def test_a_key_function_that_fails_stores_nothing(stack: Stack) -> None:
    app = stack.app()

    @app.task("raises", key_concurrency=1, concurrency_key=lambda payload: payload["missing"])
    async def raises(ctx: JobContext) -> None: ...

    @app.task("not-text", key_concurrency=1, concurrency_key=lambda payload: 42)
    async def not_text(ctx: JobContext) -> None: ...

    with pytest.raises(ConcurrencyKeyError, match="raised KeyError"):
        await raises.enqueue(account="a")
    with pytest.raises(ConcurrencyKeyError, match="must return a non-empty string, not 42"):
        await not_text.enqueue()
    with pytest.raises(ConcurrencyKeyError):
        await app.enqueue_many([("not-text", {}) for _ in range(3)])
    assert await app.count_jobs() == 0


async def test_bad_enqueue_options_are_refused(stack: Stack) -> None:
    app = stack.app()

    @app.task("t")
    async def t(ctx: JobContext) -> None: ...

    with pytest.raises(ValueError, match="debounce needs an idempotency_key"):
        await app.enqueue("t", debounce="1s")
    with pytest.raises(ValueError, match="drop delay, run_at and depends_on"):
        await app.enqueue("t", debounce="1s", idempotency_key="k", delay=5)
    with pytest.raises(ValueError, match="concurrency_key must be a non-empty string"):
        await app.enqueue("t", concurrency_key="")
    assert await app.count_jobs() == 0


async def test_a_debounced_burst_runs_once_with_the_last_payload(stack: Stack) -> None:
    app = stack.app()
    seen: list[int] = []

    @app.task("reindex", debounce="0.3s")
    async def reindex(ctx: JobContext, version: int) -> None:
        seen.append(version)

    async with running(app, concurrency=4):
        jobs = [
            await reindex.with_options(idempotency_key="doc-1").enqueue(version=n)
            for n in range(10)
        ]
        assert len({job.id for job in jobs}) == 1
        assert (await settled(jobs[0])).state is JobState.COMPLETED
    assert seen == [9]


async def test_key_usage_shows_running_jobs_per_key(stack: Stack) -> None:
    app = stack.app()

    @app.task("capped", key_concurrency=2, concurrency_key="tenant")
    async def capped(ctx: JobContext) -> None: ...

    for tenant in ("a", "a", "a", "b"):
        await app.enqueue("capped", tenant=tenant)
    await app.enqueue("capped")  # no tenant: the task's shared group
    backend = await app.connect()
    claimed = await backend.claim_jobs(
        ClaimRequest(
            worker_id="w", queues=["default"], limit=10, lease=30, key_limits={"capped": 2}
        )
    )
    assert len(claimed.jobs) == 4
    usage = [row.to_dict() for row in await app.key_usage()]
    assert usage == [
        {"task": "capped", "key": "a", "running": 2, "waiting": 1, "cap": 2},
        {"task": "capped", "key": None, "running": 1, "waiting": 0, "cap": 2},
        {"task": "capped", "key": "b", "running": 1, "waiting": 0, "cap": 2},
    ]
    assert await app.key_usage(limit=1) == [KeyUsage("capped", "a", 2, 2, 1)]


async def test_rate_usage_shows_starts_per_key_against_the_limit(stack: Stack) -> None:
    app = stack.app()

    @app.task("call", rate_limit="2/m", rate_limit_key="tenant")
    async def call(ctx: JobContext) -> None: ...

    @app.task("plain", rate_limit="5/m")
    async def plain(ctx: JobContext) -> None: ...

    assert app.key_rate_limits() == {"call": RateLimit(2, 60.0)}
    for tenant in ("a", "a", "a", "b"):
        await app.enqueue("call", tenant=tenant)
    backend = await app.connect()
    claimed = await backend.claim_jobs(
        ClaimRequest(
            worker_id="w",
            queues=["default"],
            limit=10,
            lease=30,
            key_rate_limits=app.key_rate_limits(),
        )
    )
    assert len(claimed.jobs) == 3  # a's window took 2 of its 3 jobs
    assert await app.rate_usage() == [
        RateUsage("call", "a", 2, 2, 60.0),
        RateUsage("call", "b", 1, 2, 60.0),
    ]


async def test_a_batch_may_not_mix_debounced_and_plain_entries_of_a_key(stack: Stack) -> None:
    app = stack.app()

    @app.task("t")
    async def t(ctx: JobContext) -> None: ...

    with pytest.raises(ValueError, match="with and without debounce"):
        await app.enqueue_many(
            [
                ("t", {}, {"idempotency_key": "k"}),
                ("t", {}, {"idempotency_key": "k", "debounce": 1}),
            ]
        )
    assert await app.count_jobs() == 0
    both = await app.enqueue_many(
        [("t", {"n": n}, {"idempotency_key": "k", "debounce": 1}) for n in range(3)]
    )
    assert len({job.id for job in both}) == 1
    assert (await app.get_job(both[0].id)).payload == {"n": 2}  # type: ignore[union-attr]

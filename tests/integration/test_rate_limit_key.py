"""Rate limits per key through the app and a worker: the key from the tenant, a
function of the payload, or the enqueue; one window per key, a spent key not
slowing the others; bad options get clear typed errors and store nothing."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

import pytest
from worker_fixtures import Stack, running, settled

from conveyor import BatchContext, Job, JobState, RateLimitKeyError
from conveyor.context import JobContext
from conveyor.task import Handler


def most_in_any_window(starts: list[float], period: float) -> int:
    """The most starts inside any sliding window of ``period`` seconds."""
    starts = sorted(starts)
    most = 0
    first = 0
    for last, at in enumerate(starts):
        while at - starts[first] >= period:
            first += 1
        most = max(most, last - first + 1)
    return most


async def test_each_key_has_its_own_window(stack: Stack) -> None:
    app = stack.app()
    starts: dict[str, list[float]] = defaultdict(list)

    @app.task("call", rate_limit="3/s", rate_limit_key=lambda payload: payload["api_key"])
    async def call(ctx: JobContext, api_key: str) -> None:
        starts[api_key].append(time.monotonic())

    jobs = [await call.enqueue(api_key=f"k{n % 2}") for n in range(6)]
    jobs += [await call.enqueue(api_key="busy") for _ in range(9)]
    assert {job.rate_limit_key for job in jobs} == {"k0", "k1", "busy"}
    async with running(app, concurrency=20):
        for job in jobs:
            assert (await settled(job, timeout=20)).state is JobState.COMPLETED
    for key, times in starts.items():
        assert most_in_any_window(times, 0.98) <= 3, (key, times)
    busy = sorted(starts["busy"])
    assert busy[-1] - busy[0] >= 1.9  # 9 starts at 3/s: three windows
    # k0 and k1 (3 jobs each) fit in their first window: the busy key's backlog
    # does not hold them back until its own window slides.
    assert max(starts["k0"] + starts["k1"]) < busy[3]


async def test_the_tenant_keys_the_window(stack: Stack) -> None:
    app = stack.app()

    @app.task("per-tenant", rate_limit="5/s", rate_limit_key="tenant")
    async def per_tenant(ctx: JobContext) -> None: ...

    job = await app.enqueue("per-tenant", tenant="org-1")
    assert job.rate_limit_key == "org-1"
    assert (await app.get_job(job.id)).rate_limit_key == "org-1"  # type: ignore[union-attr]
    assert (await app.enqueue("per-tenant")).rate_limit_key is None


async def test_the_enqueue_sets_the_key(stack: Stack) -> None:
    app = stack.app()

    @app.task("call", rate_limit="5/s", rate_limit_key=lambda payload: "from-task")
    async def call(ctx: JobContext) -> None: ...

    job = await app.enqueue("call", rate_limit_key="api-42")
    assert job.rate_limit_key == "api-42"
    assert (await app.get_job(job.id)).rate_limit_key == "api-42"  # type: ignore[union-attr]
    assert (await app.enqueue("call")).rate_limit_key == "from-task"


async def test_a_class_handler_keys_by_a_plain_method(stack: Stack) -> None:
    app = stack.app()

    class Call(Handler):
        name = "call"
        rate_limit = "5/s"

        def rate_limit_key(payload: dict[str, Any]) -> str:  # type: ignore[misc]
            return str(payload["api_key"])

        async def process(self, ctx: JobContext, payload: Any) -> None: ...

    app.register(Call())
    assert (await app.enqueue("call", {"api_key": "k-1"})).rate_limit_key == "k-1"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rate_limit_key": "tenant"}, "rate_limit_key needs rate_limit"),
        ({"rate_limit": "5/s", "rate_limit_key": "account"}, "must be 'tenant' or a function"),
        ({"rate_limit": "5/s", "rate_limit_key": 7}, "must be 'tenant' or a function"),
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

    @app.task("raises", rate_limit="5/s", rate_limit_key=lambda payload: payload["missing"])
    async def raises(ctx: JobContext) -> None: ...

    @app.task("not-text", rate_limit="5/s", rate_limit_key=lambda payload: None)
    async def not_text(ctx: JobContext) -> None: ...

    with pytest.raises(RateLimitKeyError, match="raised KeyError"):
        await raises.enqueue(account="a")
    with pytest.raises(RateLimitKeyError, match="must return a non-empty string, not None"):
        await not_text.enqueue()
    with pytest.raises(RateLimitKeyError):
        await app.enqueue_many([("not-text", {}) for _ in range(3)])
    assert await app.count_jobs() == 0


async def test_bad_enqueue_options_are_refused(stack: Stack) -> None:
    app = stack.app()

    @app.task("plain")
    async def plain(ctx: JobContext) -> None: ...

    @app.task("task-wide", rate_limit="5/s")
    async def task_wide(ctx: JobContext) -> None: ...

    with pytest.raises(RateLimitKeyError, match="'plain' has no rate_limit"):
        await app.enqueue("plain", rate_limit_key="k")
    with pytest.raises(RateLimitKeyError, match="'task-wide' declares no rate_limit_key"):
        await app.enqueue("task-wide", rate_limit_key="k")
    with pytest.raises(ValueError, match="rate_limit_key must be a non-empty string"):
        await app.enqueue("plain", rate_limit_key="")
    assert await app.count_jobs() == 0
    # A task this app does not know (run by another process's workers) takes the key as given.
    assert (await app.enqueue("elsewhere", rate_limit_key="k")).rate_limit_key == "k"


async def test_batches_and_prefetch_respect_each_window(stack: Stack) -> None:
    app = stack.app()
    batches: list[tuple[float, Counter[str]]] = []

    @app.task(
        "bulk",
        batch_size=10,
        rate_limit="3/s",
        rate_limit_key=lambda payload: payload["key"],
    )
    async def bulk(ctx: BatchContext, jobs: list[Job]) -> list[None]:
        batches.append((time.monotonic(), Counter(job.rate_limit_key or "" for job in jobs)))
        return [None] * len(jobs)

    jobs = await app.enqueue_many([("bulk", {"key": key}) for key in ("a", "b") for _ in range(6)])
    async with running(app, concurrency=20, prefetch=20):
        for job in jobs:
            assert (await settled(job, timeout=20)).state is JobState.COMPLETED
    first_window = Counter[str]()
    for at, counts in batches:
        if at - batches[0][0] < 0.9:
            first_window.update(counts)
    # A batch (and the prefetch buffer) never takes more of a key than its window admits.
    assert first_window == {"a": 3, "b": 3}, batches

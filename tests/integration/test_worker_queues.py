"""Queues and enqueue options: idempotency, atomic batches and backpressure,
TTL expiry, worker targeting, and the dead-letter queue through the app."""

from __future__ import annotations

import asyncio

import pytest
from worker_fixtures import (
    Recorder,
    Stack,
    running,
    settled,
)

from conveyor import (
    FailureReason,
    InvalidStateError,
    JobFailed,
    JobNotFound,
    JobState,
    QueueFull,
)
from conveyor.context import JobContext


async def test_idempotency_key_returns_the_existing_job_and_runs_once(stack: Stack) -> None:
    app = stack.app()
    recorder = Recorder(app, "enqueued")
    runs: list[str] = []

    @app.task("welcome")
    async def welcome(ctx: JobContext, user: str) -> str:
        runs.append(user)
        return f"hi {user}"

    first = await app.enqueue("welcome", {"user": "u42"}, idempotency_key="welcome-42")
    again = await app.enqueue("welcome", {"user": "u42"}, idempotency_key="welcome-42")
    other = await app.enqueue("welcome", {"user": "u7"}, idempotency_key="welcome-7")
    assert first.duplicate is False
    assert again.duplicate is True
    assert again.id == first.id
    assert other.id != first.id
    assert [d["job"].id for d in recorder.of("enqueued")] == [first.id, other.id]
    assert await app.drain() == 2
    assert sorted(runs) == ["u42", "u7"]
    after = await app.enqueue("welcome", {"user": "u42"}, idempotency_key="welcome-42")
    assert after.duplicate is True
    assert after.id == first.id
    assert after.state is JobState.COMPLETED
    assert await app.drain() == 0
    assert await app.count_jobs() == 2


async def test_idempotency_within_one_batch(stack: Stack) -> None:
    app = stack.app()

    @app.task("once")
    async def once(ctx: JobContext) -> None: ...

    jobs = await app.enqueue_many(
        [
            ("once", {}, {"idempotency_key": "k"}),
            ("once", {}, {"idempotency_key": "k"}),
            ("once", {}),
        ]
    )
    assert [job.duplicate for job in jobs] == [False, True, False]
    assert jobs[0].id == jobs[1].id
    assert await app.count_jobs() == 2


async def test_enqueue_many_keeps_order_and_options(stack: Stack) -> None:
    app = stack.app()

    @app.task("batch")
    async def batch(ctx: JobContext, n: int) -> int:
        return n

    jobs = await app.enqueue_many(
        [
            ("batch", {"n": 1}),
            ("batch", {"n": 2}, {"delay": 30}),
            ("batch", {"n": 3}, {"priority": 5, "tenant": "org-1"}),
        ]
    )
    assert [job.payload for job in jobs] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert [job.state for job in jobs] == [JobState.WAITING, JobState.DELAYED, JobState.WAITING]
    assert jobs[2].priority == 5
    assert jobs[2].tenant == "org-1"
    assert await app.enqueue_many([]) == []


async def test_enqueue_many_is_atomic_when_the_queue_is_full(stack: Stack) -> None:
    app = stack.app()
    app.queue("small", max_size=3)

    @app.task("bounded", queue="small")
    async def bounded(ctx: JobContext) -> None: ...

    with pytest.raises(QueueFull) as info:
        await app.enqueue_many([("bounded", {"i": i}) for i in range(4)])
    assert info.value.queue == "small"
    assert info.value.max_size == 3
    assert await app.count_jobs() == 0
    await app.enqueue_many([("bounded", {"i": i}) for i in range(2)])
    with pytest.raises(QueueFull):
        await app.enqueue_many(
            [("bounded", {"i": 2}), ("bounded", {"i": 3}), ("other.task", {}, {"queue": "big"})]
        )
    assert await app.count_jobs() == 2  # not even the job for the other queue
    assert await app.count_jobs(queue="big") == 0
    await bounded.enqueue(i=2)
    with pytest.raises(QueueFull):
        await bounded.enqueue(i=3)
    # Running jobs free room: the cap counts waiting + delayed.
    assert await app.drain() == 3
    await app.enqueue_many([("bounded", {"i": i}) for i in range(3)])
    assert await app.count_jobs(queue="small", state="waiting") == 3


async def test_queue_ttl_expires_a_waiting_job_into_the_dead_letters(stack: Stack) -> None:
    app = stack.app()
    app.queue("perishable", ttl="0.2s")
    recorder = Recorder(app, "expired", "dead")
    ran: list[str] = []

    @app.task("perish", queue="perishable")
    async def perish(ctx: JobContext) -> None:
        ran.append(ctx.job.id)

    job = await perish.enqueue()
    assert job.expires_at is not None
    # A worker that does not listen on the queue still expires it in its claims.
    async with running(app, queues=["default"]):
        (event,) = await recorder.wait_for("expired")
        assert event["job"].id == job.id
    expired = await settled(job)
    assert expired.state is JobState.FAILED
    assert expired.failure_reason is FailureReason.EXPIRED
    assert expired.attempts == 0
    assert expired.error is not None
    assert "TTL" in expired.error.message
    assert ran == []
    (dead,) = recorder.of("dead")
    assert dead["reason"] == "expired"
    assert [j.id for j in await app.dlq.list(reason="expired")] == [job.id]
    with pytest.raises(JobFailed, match="expired"):
        await job.wait(timeout=1)


async def test_job_ttl_option(stack: Stack) -> None:
    app = stack.app()

    @app.task("fresh")
    async def fresh(ctx: JobContext) -> str:
        return "ran"

    stale = await app.enqueue("fresh", ttl=0.1, queue="parked")
    ok = await app.enqueue("fresh", ttl=30)
    async with running(app, queues=["default"]):
        assert await ok.wait(timeout=10) == "ran"
        with pytest.raises(JobFailed) as info:
            await stale.wait(timeout=10)
    assert info.value.job.failure_reason is FailureReason.EXPIRED


async def test_ttl_counts_from_when_a_delayed_job_is_due(stack: Stack) -> None:
    app = stack.app()

    @app.task("delayed.ttl")
    async def delayed_ttl(ctx: JobContext) -> str:
        return "ran"

    job = await app.enqueue("delayed.ttl", delay=0.3, ttl=0.2)  # expired if counted from enqueue
    async with running(app):
        assert await job.wait(timeout=10) == "ran"


async def test_worker_targeting_runs_only_on_that_worker(stack: Stack) -> None:
    app = stack.app()
    ran_on: list[str] = []

    @app.task("pinned")
    async def pinned(ctx: JobContext, n: int) -> int:
        ran_on.append(ctx.worker_id)
        await asyncio.sleep(0.01)
        return n

    async with (
        running(app, worker_id="w-a") as first,
        running(app, worker_id="w-b") as second,
    ):
        assert first.own_queue == "worker.w-a"
        assert "worker.w-b" in second.queues
        jobs = [await app.enqueue("pinned", {"n": n}, worker="w-b") for n in range(8)]
        assert {job.queue for job in jobs} == {"worker.w-b"}
        assert [await job.wait(timeout=10) for job in jobs] == list(range(8))
    assert ran_on == ["w-b"] * 8


async def test_job_for_a_missing_worker_expires(stack: Stack) -> None:
    app = stack.app(worker_queue_ttl="0.3s")
    recorder = Recorder(app, "expired")

    @app.task("orphaned")
    async def orphaned(ctx: JobContext) -> None:
        raise AssertionError("must never run")

    job = await app.enqueue("orphaned", worker="ghost")
    assert job.queue == "worker.ghost"
    assert job.expires_at is not None
    assert job.expires_at == pytest.approx(job.run_at + 0.3)
    async with running(app, worker_id="w-real"):
        with pytest.raises(JobFailed) as info:
            await job.wait(timeout=10)
        await recorder.wait_for("expired")
    assert info.value.job.failure_reason is FailureReason.EXPIRED
    assert info.value.job.attempts == 0


async def test_explicit_ttl_wins_over_the_worker_queue_ttl(stack: Stack) -> None:
    app = stack.app(worker_queue_ttl="0.1s")

    @app.task("pinned.patient")
    async def pinned_patient(ctx: JobContext) -> str:
        return "ran"

    job = await app.enqueue("pinned.patient", worker="w-late", ttl=30)
    await asyncio.sleep(0.2)  # past the worker-queue TTL, within its own
    async with running(app, worker_id="w-late"):
        assert await job.wait(timeout=10) == "ran"


async def test_queues_and_stats(stack: Stack) -> None:
    app = stack.app()

    @app.task("mail", queue="emails")
    async def mail(ctx: JobContext) -> None: ...

    @app.task("fail", attempts=1)
    async def fail(ctx: JobContext) -> None:
        raise RuntimeError("x")

    await mail.enqueue()
    await mail.enqueue()
    await app.enqueue("mail", delay=60)
    await fail.enqueue()
    cancelled = await fail.enqueue()
    await app.cancel(cancelled.id)
    await app.drain(queues=["default"])
    stats = await app.stats()
    assert stats["emails"] == {
        "waiting": 2,
        "delayed": 1,
        "active": 0,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
        "blocked": 0,
    }
    assert stats["default"]["failed"] == 1
    assert stats["default"]["cancelled"] == 1
    await app.drain()
    assert (await app.stats())["emails"]["completed"] == 2


async def test_paused_queue_is_not_claimed_until_resumed(stack: Stack) -> None:
    app = stack.app()

    @app.task("pausable")
    async def pausable(ctx: JobContext) -> str:
        return "ran"

    await app.pause_queue("default")
    job = await pausable.enqueue()
    async with running(app):
        await asyncio.sleep(0.2)
        current = await app.get_job(job.id)
        assert current is not None
        assert current.state is JobState.WAITING
        await app.resume_queue("default")
        assert await job.wait(timeout=10) == "ran"


async def test_dead_letter_queue_through_the_app(stack: Stack) -> None:
    app = stack.app()
    fixed = False

    @app.task("charge", attempts=1)
    async def charge(ctx: JobContext, amount: int) -> int:
        if not fixed:
            raise RuntimeError("card declined")
        return amount

    @app.task("ship", attempts=1, queue="shipping")
    async def ship(ctx: JobContext) -> None:
        raise RuntimeError("no address")

    c1 = await app.enqueue("charge", {"amount": 10}, tenant="org-1")
    c2 = await app.enqueue("charge", {"amount": 20}, tenant="org-2")
    s1 = await app.enqueue("ship", tenant="org-1")
    ok = await app.enqueue("charge", {"amount": 1}, delay=60)  # not failed: not a dead letter
    await app.drain()

    assert await app.dlq.count() == 3
    assert {j.id for j in await app.dlq.list()} == {c1.id, c2.id, s1.id}
    assert {j.id for j in await app.dlq.list(task="charge")} == {c1.id, c2.id}
    assert [j.id for j in await app.dlq.list(queue="shipping")] == [s1.id]
    assert {j.id for j in await app.dlq.list(tenant="org-1")} == {c1.id, s1.id}
    assert await app.dlq.count(reason="error") == 3
    assert await app.dlq.count(reason=FailureReason.TIMEOUT) == 0
    assert len(await app.dlq.list(limit=2)) == 2
    assert ok.id not in {j.id for j in await app.dlq.list()}

    # retry: a fresh job, attempts from zero; the original points at it
    fixed = True
    new = await app.dlq.retry(c1.id)
    assert new.id != c1.id
    assert new.state is JobState.WAITING
    assert new.attempts == 0
    assert new.retry_of == c1.id
    assert new.payload == {"amount": 10}
    assert new.tenant == "org-1"
    original = await app.get_job(c1.id)
    assert original is not None
    assert original.retried_as == new.id
    assert original.state is JobState.FAILED
    await app.drain()
    assert await new.wait(timeout=1) == 10
    with pytest.raises(InvalidStateError):
        await app.dlq.retry(new.id)  # completed, not a dead letter
    with pytest.raises(JobNotFound):
        await app.dlq.retry("no-such-job")

    # delete: only dead letters
    await app.dlq.delete(s1.id)
    assert await app.get_job(s1.id) is None
    with pytest.raises(JobNotFound):
        await app.dlq.delete(s1.id)
    with pytest.raises(JobNotFound):
        await app.dlq.delete(new.id)  # completed jobs are not deleted through the DLQ
    assert await app.get_job(new.id) is not None

    # purge: by filters and by age
    assert await app.dlq.purge(older_than="1h") == 0
    assert await app.dlq.purge(task="ship") == 0
    assert await app.dlq.purge(tenant="org-2") == 1
    assert await app.dlq.count() == 1
    await asyncio.sleep(0.05)
    assert await app.dlq.purge(older_than=0.01) == 1
    assert await app.dlq.count() == 0
    assert await app.get_job(new.id) is not None  # purge touches only failed jobs
    assert await app.get_job(ok.id) is not None


async def test_a_retry_is_not_expired_by_the_ttl_of_its_first_run(stack: Stack) -> None:
    from conveyor import Backoff

    app = stack.app()
    runs: list[int] = []

    @app.task("retry.with.ttl", attempts=2, backoff=Backoff.fixed(0.4))
    async def retry_with_ttl(ctx: JobContext) -> str:
        runs.append(ctx.job.attempts)
        if ctx.job.attempts == 1:
            raise ConnectionError("try again")
        return "second attempt"

    job = await app.enqueue("retry.with.ttl", ttl=0.3)
    async with running(app):
        final = await settled(job)
    assert runs == [1, 2], (final.state, final.failure_reason)
    assert final.state is JobState.COMPLETED

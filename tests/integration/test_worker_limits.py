"""Limits and ordering: per-task and per-worker concurrency, rate limits, the
circuit breaker, priorities and delays."""

from __future__ import annotations

import asyncio
import time

import pytest
from worker_fixtures import (
    Recorder,
    Stack,
    running,
    settled,
)

from conveyor import Backoff, JobState
from conveyor.backends.base import CircuitState
from conveyor.context import JobContext
from conveyor.task import Priority


class Gauge:
    """Counts handlers running at once and remembers the peak."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    async def hold(self, seconds: float) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(seconds)
        finally:
            self.now -= 1


async def test_per_task_concurrency(stack: Stack) -> None:
    app = stack.app()
    capped, free = Gauge(), Gauge()

    @app.task("capped", concurrency=2)
    async def capped_task(ctx: JobContext) -> None:
        await capped.hold(0.05)

    @app.task("free")
    async def free_task(ctx: JobContext) -> None:
        await free.hold(0.05)

    jobs = [await capped_task.enqueue() for _ in range(10)]
    jobs += [await free_task.enqueue() for _ in range(6)]
    async with running(app, concurrency=20):
        for job in jobs:
            assert (await settled(job)).state is JobState.COMPLETED
    assert capped.peak == 2
    assert free.peak == 6  # the cap is per task: the other task was not held back


async def test_per_task_concurrency_holds_across_claims(stack: Stack) -> None:
    """Jobs arriving while capped ones run must not slip past the cap."""
    app = stack.app()
    gauge = Gauge()

    @app.task("trickle", concurrency=3)
    async def trickle(ctx: JobContext) -> None:
        await gauge.hold(0.05)

    async with running(app, concurrency=50):
        jobs = []
        for _ in range(12):
            jobs.append(await trickle.enqueue())
            await asyncio.sleep(0.01)
        for job in jobs:
            await settled(job)
    assert gauge.peak == 3


async def test_per_worker_concurrency(stack: Stack) -> None:
    app = stack.app()
    gauge = Gauge()

    @app.task("busy")
    async def busy(ctx: JobContext) -> None:
        await gauge.hold(0.05)

    jobs = [await busy.enqueue() for _ in range(12)]
    async with running(app, concurrency=3) as worker:
        for job in jobs:
            await settled(job)
        assert worker.processed == 12
    assert gauge.peak == 3


async def test_drain_concurrency(stack: Stack) -> None:
    app = stack.app()
    gauge = Gauge()

    @app.task("drained")
    async def drained(ctx: JobContext) -> None:
        await gauge.hold(0.03)

    for _ in range(8):
        await drained.enqueue()
    assert await app.drain(concurrency=2) == 8
    assert gauge.peak == 2


async def test_rate_limit_is_a_sliding_window(stack: Stack) -> None:
    app = stack.app()
    limit, period = 5, 0.5

    @app.task("limited", rate_limit="5/0.5s")
    async def limited(ctx: JobContext) -> None:
        await asyncio.sleep(0.01)

    jobs = [await limited.enqueue() for _ in range(11)]
    async with running(app, concurrency=50):
        done = [await settled(job, timeout=20) for job in jobs]
    assert all(job.state is JobState.COMPLETED for job in done)
    # The limiter counts starts on the backend's clock: the claim's started_at.
    starts = sorted(job.started_at for job in done if job.started_at is not None)
    assert len(starts) == 11
    for i, first in enumerate(starts):
        in_window = [s for s in starts[i:] if s < first + period]
        assert len(in_window) <= limit, (first, in_window)
    # 11 starts at 5 per 0.5 s need at least two full periods.
    assert starts[-1] - starts[0] >= 2 * period - 0.02
    assert all(job.attempts == 1 for job in done)  # waiting, not failing


async def test_rate_limited_jobs_wait_and_other_tasks_are_not_held(stack: Stack) -> None:
    app = stack.app()

    @app.task("slow.lane", rate_limit="1/s")
    async def slow_lane(ctx: JobContext) -> None: ...

    @app.task("fast.lane")
    async def fast_lane(ctx: JobContext, n: int) -> int:
        return n

    limited = [await slow_lane.enqueue() for _ in range(2)]
    async with running(app):
        first = await settled(limited[0])
        fast = [await fast_lane.enqueue(n=n) for n in range(5)]
        fast_done = [await settled(job) for job in fast]
        second = await settled(limited[1])
    assert [job.result for job in fast_done] == list(range(5))
    assert first.started_at is not None
    assert second.started_at is not None
    # The second rate-limited job waited out the window (not failed: one attempt) ...
    assert second.started_at >= first.started_at + 1.0
    assert second.attempts == 1
    # ... while the other task's jobs ran straight away, not queued behind it.
    for job in fast_done:
        assert job.started_at is not None
        assert job.started_at < second.started_at


async def test_circuit_breaker_opens_waits_trials_and_closes(stack: Stack) -> None:
    app = stack.app(circuit_threshold=3, circuit_open_for="0.8s")
    recorder = Recorder(app, "circuit_opened", "circuit_closed")
    healthy = False

    @app.task("fragile", attempts=1)
    async def fragile(ctx: JobContext, n: int) -> int:
        if not healthy:
            raise ConnectionError("downstream is down")
        await asyncio.sleep(0.05)
        return n

    failing = [await fragile.enqueue(n=n) for n in range(3)]
    async with running(app, concurrency=10):
        for job in failing:
            assert (await settled(job)).state is JobState.FAILED
        (opened,) = await recorder.wait_for("circuit_opened")
        assert opened["task"] == "fragile"
        circuit = opened["circuit"]
        assert circuit.state is CircuitState.OPEN
        assert circuit.failures == 3
        assert circuit.open_until is not None
        (listed,) = await app.circuits()
        assert listed.state is CircuitState.OPEN

        healthy = True
        later = [await fragile.enqueue(n=n) for n in range(4)]
        await asyncio.sleep(0.2)
        backend = await app.connect()
        if await backend.now() < circuit.open_until - 0.05:  # still open: all wait
            for job in later:
                current = await app.get_job(job.id)
                assert current is not None
                assert current.state is JobState.WAITING
        done = [await settled(job, timeout=10) for job in later]
        (closed,) = await recorder.wait_for("circuit_closed")
        assert closed["task"] == "fragile"
        assert closed["circuit"].state is CircuitState.CLOSED

    assert all(job.state is JobState.COMPLETED for job in done)
    starts = sorted(done, key=lambda job: job.started_at or 0.0)
    trial, rest = starts[0], starts[1:]
    assert trial.started_at is not None
    assert trial.started_at >= circuit.open_until - 0.01
    # Half-open admits one trial; the others start only once it succeeded.
    assert trial.finished_at is not None
    for job in rest:
        assert job.started_at is not None
        assert job.started_at >= trial.finished_at - 0.01
    (final,) = await app.circuits()
    assert final.state is CircuitState.CLOSED
    assert final.failures == 0


async def test_failed_trial_reopens_the_circuit(stack: Stack) -> None:
    app = stack.app(circuit_threshold=2, circuit_open_for="0.3s")
    recorder = Recorder(app, "circuit_opened", "circuit_closed")
    runs: list[float] = []

    @app.task("broken", attempts=1)
    async def broken(ctx: JobContext) -> None:
        runs.append(time.monotonic())
        raise ConnectionError("still down")

    jobs = [await broken.enqueue() for _ in range(2)]
    async with running(app):
        for job in jobs:
            await settled(job)
        await recorder.wait_for("circuit_opened")
        trial_job = await broken.enqueue()
        await settled(trial_job)
        await recorder.wait_for("circuit_opened", count=2)
    assert recorder.of("circuit_closed") == []
    assert len(runs) == 3


async def test_circuit_threshold_per_task_and_reset(stack: Stack) -> None:
    app = stack.app(circuit_threshold=100)
    recorder = Recorder(app, "circuit_opened")

    @app.task("touchy", attempts=1, circuit_threshold=1, circuit_open_for=60)
    async def touchy(ctx: JobContext) -> None:
        raise ConnectionError("x")

    first = await touchy.enqueue()
    async with running(app):
        await settled(first)
        await recorder.wait_for("circuit_opened")
        blocked = await touchy.enqueue()
        await asyncio.sleep(0.2)
        current = await app.get_job(blocked.id)
        assert current is not None
        assert current.state is JobState.WAITING
        await app.reset_circuit("touchy")
        failed = await settled(blocked)
    assert failed.state is JobState.FAILED
    assert failed.attempts == 1


async def test_priority_order_in_a_single_slot_worker(stack: Stack) -> None:
    app = stack.app()
    order: list[str] = []

    @app.task("ranked")
    async def ranked(ctx: JobContext, name: str) -> None:
        order.append(name)

    plan = [
        ("normal-1", Priority.NORMAL),
        ("low", Priority.LOW),
        ("high-1", Priority.HIGH),
        ("critical", Priority.CRITICAL),
        ("normal-2", Priority.NORMAL),
        ("high-2", Priority.HIGH),
        ("custom-15", 15),
    ]
    for name, priority in plan:
        await app.enqueue("ranked", {"name": name}, priority=priority)
    assert await app.drain(concurrency=1) == len(plan)
    assert order == ["critical", "custom-15", "high-1", "high-2", "normal-1", "normal-2", "low"]


async def test_task_priority_is_the_default(stack: Stack) -> None:
    app = stack.app()
    order: list[str] = []

    @app.task("background", priority=Priority.LOW)
    async def background(ctx: JobContext) -> None:
        order.append("background")

    @app.task("urgent", priority=Priority.CRITICAL)
    async def urgent(ctx: JobContext) -> None:
        order.append("urgent")

    await background.enqueue()
    await urgent.enqueue()
    await app.enqueue("background", priority=Priority.HIGH)
    await app.drain(concurrency=1)
    assert order == ["urgent", "background", "background"]
    listed = sorted(j.priority for j in await app.list_jobs(task="background"))
    assert listed == [Priority.LOW, Priority.HIGH]


async def test_delayed_job_does_not_run_before_it_is_due(stack: Stack) -> None:
    app = stack.app()
    ran_at: list[float] = []

    @app.task("later")
    async def later(ctx: JobContext) -> None:
        ran_at.append(time.time())

    job = await app.enqueue("later", delay=0.4)
    assert job.state is JobState.DELAYED
    assert job.run_at >= job.created_at + 0.4 - 1e-6
    assert await app.drain() == 0  # not due yet: drain leaves it alone
    stored = await app.get_job(job.id)
    assert stored is not None
    assert stored.state is JobState.DELAYED
    async with running(app):
        done = await settled(job)
    assert done.started_at is not None
    assert done.started_at >= job.run_at
    assert ran_at[0] >= job.run_at - 0.01


async def test_run_at_datetime(stack: Stack) -> None:
    from datetime import UTC, datetime, timedelta

    app = stack.app()

    @app.task("at")
    async def at(ctx: JobContext) -> str:
        return "ran"

    await app.connect()  # opening the store (a migration) must not eat the delay
    # Far enough ahead that a busy host still stores the job before it is due.
    when = datetime.now(UTC) + timedelta(seconds=1.0)
    job = await app.enqueue("at", run_at=when)
    assert job.state is JobState.DELAYED
    assert job.run_at == pytest.approx(when.timestamp())
    with pytest.raises(ValueError, match="timezone"):
        await app.enqueue("at", run_at=datetime.now())  # naive on purpose
    async with running(app):
        assert await job.wait(timeout=10) == "ran"
    done = await settled(job)
    assert done.started_at is not None
    assert done.started_at >= when.timestamp()


async def test_retry_backoff_delays_the_job(stack: Stack) -> None:
    app = stack.app()
    seen: list[JobState] = []

    @app.task("retry.later", attempts=2, backoff=Backoff.fixed(0.3))
    async def retry_later(ctx: JobContext) -> str:
        if ctx.job.attempts == 1:
            raise ConnectionError("x")
        return "ok"

    job = await retry_later.enqueue()
    await app.drain()
    current = await app.get_job(job.id)
    assert current is not None
    seen.append(current.state)
    assert current.run_at >= (current.started_at or 0) + 0.3 - 0.05
    assert await app.drain() == 0  # the backoff has not passed
    async with running(app):
        assert await job.wait(timeout=10) == "ok"
    assert seen == [JobState.DELAYED]


async def test_drain_runs_rate_limited_jobs_too(stack: Stack) -> None:
    app = stack.app()

    @app.task("metered", rate_limit="2/0.3s")
    async def metered(ctx: JobContext, n: int) -> int:
        return n

    jobs = [await metered.enqueue(n=n) for n in range(4)]
    ran = await app.drain()
    states = [(await settled(job, timeout=0.1)).state for job in jobs]
    assert ran == 4
    assert states == [JobState.COMPLETED] * 4

"""Failures: retries with backoff, exhausted attempts, non-retryable errors,
timeouts, hooks, and the events a run emits."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any

import pytest
from worker_fixtures import (
    Recorder,
    Stack,
    released,
    running,
    settled,
)

from conveyor import Backoff, FailureReason, JobState
from conveyor.context import JobContext
from conveyor.task import Handler


class Flaky(Exception):
    """An error the tests raise on purpose."""


async def test_retries_with_fixed_backoff_then_success(stack: Stack) -> None:
    app = stack.app()
    recorder = Recorder(app, "retrying", "failed")
    starts: list[float] = []

    @app.task("flaky", attempts=4, backoff=Backoff.fixed(0.15))
    async def flaky(ctx: JobContext) -> str:
        starts.append(time.monotonic())
        if len(starts) < 3:
            raise Flaky(f"try {len(starts)}")
        return "third time lucky"

    job = await flaky.enqueue()
    async with running(app):
        done = await settled(job)
    assert done.state is JobState.COMPLETED
    assert done.result == "third time lucky"
    assert done.attempts == 3
    assert [e.message for e in done.errors] == ["try 1", "try 2"]
    assert [e.attempt for e in done.errors] == [1, 2]
    assert [d["delay"] for d in recorder.of("retrying")] == [0.15, 0.15]
    assert [d["will_retry"] for d in recorder.of("failed")] == [True, True]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(gap >= 0.14 for gap in gaps), gaps


async def test_retries_with_exponential_backoff(stack: Stack) -> None:
    app = stack.app()
    recorder = Recorder(app, "retrying")
    starts: list[float] = []

    @app.task("expo", attempts=4, backoff=Backoff.exponential(base=0.1, multiplier=2, max=1))
    async def expo(ctx: JobContext) -> int:
        starts.append(time.monotonic())
        if len(starts) < 4:
            raise Flaky("again")
        return len(starts)

    job = await expo.enqueue()
    async with running(app):
        assert await job.wait(timeout=10) == 4
    assert [d["delay"] for d in recorder.of("retrying")] == pytest.approx([0.1, 0.2, 0.4])
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    for gap, delay in zip(gaps, [0.1, 0.2, 0.4], strict=True):
        assert gap >= delay - 0.01, gaps


async def test_retry_delay_comes_from_app_settings_by_default(stack: Stack) -> None:
    app = stack.app(backoff_base=0.05, backoff_multiplier=3, backoff_max=0.1)
    recorder = Recorder(app, "retrying")

    @app.task("defaults", attempts=4)
    async def defaults(ctx: JobContext) -> None:
        raise Flaky("x")

    job = await defaults.enqueue()
    async with running(app):
        await settled(job)
    assert [d["delay"] for d in recorder.of("retrying")] == pytest.approx([0.05, 0.1, 0.1])


async def test_attempts_exhausted_fails_with_the_error_history(stack: Stack) -> None:
    app = stack.app()
    recorder = Recorder(app, "dead", "failed", "retrying")

    @app.task("always.fails", attempts=3, backoff=Backoff.fixed(0.02))
    async def always_fails(ctx: JobContext) -> None:
        raise ValueError(f"boom on attempt {ctx.job.attempts}")

    job = await always_fails.enqueue()
    async with running(app):
        failed = await settled(job)
    assert failed.state is JobState.FAILED
    assert failed.failure_reason is FailureReason.ERROR
    assert failed.attempts == 3
    assert failed.finished_at is not None
    assert failed.error is not None
    assert failed.error.type == "ValueError"
    assert failed.error.message == "boom on attempt 3"
    assert "Traceback" in failed.error.traceback
    assert "always_fails" in failed.error.traceback
    assert "ValueError: boom on attempt 3" in failed.error.traceback
    assert [(e.attempt, e.type, e.message, e.reason) for e in failed.errors] == [
        (n, "ValueError", f"boom on attempt {n}", "error") for n in (1, 2, 3)
    ]
    assert all("Traceback" in e.traceback for e in failed.errors)
    assert [d["will_retry"] for d in recorder.of("failed")] == [True, True, False]
    assert len(recorder.of("retrying")) == 2
    (dead,) = recorder.of("dead")
    assert dead["reason"] == "error"
    assert dead["job"].id == job.id
    assert [j.id for j in await app.dlq.list()] == [job.id]


async def test_job_attempts_override_the_task_default(stack: Stack) -> None:
    app = stack.app()
    runs: list[int] = []

    @app.task("fails.fast", attempts=5, backoff=Backoff.fixed(0.01))
    async def fails_fast(ctx: JobContext) -> None:
        runs.append(ctx.job.attempts)
        raise Flaky("x")

    job = await app.enqueue("fails.fast", attempts=2)
    async with running(app):
        failed = await settled(job)
    assert failed.attempts == 2
    assert runs == [1, 2]


async def test_is_retryable_false_fails_after_one_attempt(stack: Stack) -> None:
    app = stack.app()
    runs: list[int] = []
    asked: list[str] = []

    class Picky(Handler):
        name = "picky"
        attempts = 5
        backoff = Backoff.fixed(0.01)

        async def process(self, ctx: JobContext, payload: Any) -> Any:
            runs.append(ctx.job.attempts)
            if payload["kind"] == "permanent":
                raise PermissionError("forbidden")
            if ctx.job.attempts < 2:
                raise Flaky("transient")
            return "ok"

        def is_retryable(self, exc: BaseException) -> bool:
            asked.append(type(exc).__name__)
            return not isinstance(exc, PermissionError)

    app.register(Picky())
    permanent = await app.enqueue("picky", {"kind": "permanent"})
    async with running(app):
        failed = await settled(permanent)
        assert failed.state is JobState.FAILED
        assert failed.failure_reason is FailureReason.ERROR
        assert failed.attempts == 1
        assert runs == [1]
        transient = await app.enqueue("picky", {"kind": "transient"})
        assert await transient.wait(timeout=10) == "ok"
    assert asked == ["PermissionError", "Flaky"]


async def test_no_retry_on_fails_at_once(stack: Stack) -> None:
    app = stack.app()
    runs: list[str] = []

    @app.task("norule", attempts=5, no_retry_on=(KeyError,), backoff=Backoff.fixed(0.01))
    async def norule(ctx: JobContext, error: str) -> None:
        runs.append(error)
        raise {"key": KeyError, "value": ValueError}[error]("x")

    key_job = await norule.enqueue(error="key")
    value_job = await norule.enqueue(error="value")
    async with running(app):
        key_failed = await settled(key_job)
        value_failed = await settled(value_job)
    assert key_failed.attempts == 1
    assert key_failed.failure_reason is FailureReason.ERROR
    assert value_failed.attempts == 5
    assert runs.count("key") == 1
    assert runs.count("value") == 5


async def test_retry_on_retries_only_the_listed_errors(stack: Stack) -> None:
    app = stack.app()

    @app.task("onlyconn", attempts=3, retry_on=(ConnectionError,), backoff=Backoff.fixed(0.01))
    async def only_conn(ctx: JobContext, error: str) -> None:
        raise {"conn": ConnectionResetError, "value": ValueError}[error]("x")

    conn = await only_conn.enqueue(error="conn")  # a subclass counts
    value = await only_conn.enqueue(error="value")
    async with running(app):
        assert (await settled(conn)).attempts == 3
        assert (await settled(value)).attempts == 1


async def test_class_handler_retry_rules_combine_with_is_retryable(stack: Stack) -> None:
    app = stack.app()

    class Rules(Handler):
        name = "rules"
        attempts = 4
        backoff = Backoff.fixed(0.01)
        no_retry_on = (KeyError,)

        async def process(self, ctx: JobContext, payload: Any) -> Any:
            raise KeyError("missing")

    app.register(Rules())
    job = await app.enqueue("rules")
    async with running(app):
        assert (await settled(job)).attempts == 1


async def test_is_retryable_raising_is_treated_as_retryable(stack: Stack) -> None:
    app = stack.app()

    class Confused(Handler):
        name = "confused"
        attempts = 2
        backoff = Backoff.fixed(0.01)

        async def process(self, ctx: JobContext, payload: Any) -> Any:
            raise Flaky("x")

        def is_retryable(self, exc: BaseException) -> bool:
            raise RuntimeError("bug in is_retryable")

    app.register(Confused())
    job = await app.enqueue("confused")
    async with running(app):
        failed = await settled(job)
    assert failed.attempts == 2
    assert failed.error is not None
    assert failed.error.type == "Flaky"


async def test_async_timeout_cancels_the_handler(stack: Stack) -> None:
    app = stack.app()
    cancelled = asyncio.Event()
    recorder = Recorder(app, "failed")

    @app.task("slow", timeout=0.2, attempts=1)
    async def slow(ctx: JobContext) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job = await slow.enqueue()
    began = time.monotonic()
    async with running(app):
        failed = await settled(job, timeout=10)
    assert time.monotonic() - began < 5
    assert cancelled.is_set()
    assert failed.state is JobState.FAILED
    assert failed.failure_reason is FailureReason.TIMEOUT
    assert failed.error is not None
    assert failed.error.type == "JobTimeout"
    assert failed.error.reason == "timeout"
    assert "0.2" in failed.error.message
    (event,) = recorder.of("failed")
    assert event["will_retry"] is False


async def test_timeout_is_an_attempt_and_retried(stack: Stack) -> None:
    app = stack.app()
    runs: list[int] = []

    @app.task("sometimes.slow", timeout=0.15, attempts=3, backoff=Backoff.fixed(0.01))
    async def sometimes_slow(ctx: JobContext) -> str:
        runs.append(ctx.job.attempts)
        if ctx.job.attempts == 1:
            await asyncio.sleep(30)
        return "fast enough"

    job = await sometimes_slow.enqueue()
    async with running(app):
        assert await job.wait(timeout=10) == "fast enough"
    done = await settled(job)
    assert runs == [1, 2]
    assert [e.reason for e in done.errors] == ["timeout"]


async def test_job_timeout_option_overrides_the_task(stack: Stack) -> None:
    app = stack.app()

    @app.task("patient", timeout=30, attempts=1)
    async def patient(ctx: JobContext) -> None:
        await asyncio.sleep(30)

    job = await app.enqueue("patient", timeout=0.1)
    async with running(app):
        failed = await settled(job, timeout=10)
    assert failed.failure_reason is FailureReason.TIMEOUT


async def test_sync_timeout_abandons_the_thread(stack: Stack) -> None:
    app = stack.app()
    gate = threading.Event()
    finished: list[bool] = []

    @app.task("sync.slow", timeout=0.2, attempts=1)
    def sync_slow(ctx: JobContext) -> None:
        gate.wait(20)
        finished.append(True)

    job = await sync_slow.enqueue()
    with released(gate):
        began = time.monotonic()
        async with running(app):
            failed = await settled(job, timeout=10)
        assert time.monotonic() - began < 5
        assert failed.state is JobState.FAILED
        assert failed.failure_reason is FailureReason.TIMEOUT
        assert failed.error is not None
        assert failed.error.type == "JobTimeout"
        assert finished == []  # the thread still runs: it was abandoned, not killed


async def test_hooks_run_in_order_with_will_retry(stack: Stack) -> None:
    app = stack.app()
    calls: list[tuple[Any, ...]] = []

    class Hooked(Handler):
        name = "hooked"
        attempts = 2
        backoff = Backoff.fixed(0.01)

        async def on_start(self, ctx: JobContext) -> None:
            calls.append(("start", ctx.job.payload["key"], ctx.job.attempts))

        async def process(self, ctx: JobContext, payload: Any) -> Any:
            calls.append(("process", payload["key"], ctx.job.attempts))
            if payload["key"] == "doomed" or ctx.job.attempts == 1:
                raise Flaky(payload["key"])
            return payload["key"]

        async def on_complete(self, ctx: JobContext, result: Any) -> None:
            calls.append(("complete", result, ctx.job.attempts))

        def on_failed(self, ctx: JobContext, exc: BaseException, will_retry: bool) -> None:  # type: ignore[override]
            calls.append(("failed", str(exc), ctx.job.attempts, will_retry))

    app.register(Hooked())
    async with running(app, concurrency=1):
        job = await app.enqueue("hooked", {"key": "lucky"})
        await settled(job)
        lucky = list(calls)
        calls.clear()
        job = await app.enqueue("hooked", {"key": "doomed"})
        await settled(job)
    assert lucky == [
        ("start", "lucky", 1),
        ("process", "lucky", 1),
        ("failed", "lucky", 1, True),
        ("start", "lucky", 2),
        ("process", "lucky", 2),
        ("complete", "lucky", 2),
    ]
    assert calls == [
        ("start", "doomed", 1),
        ("process", "doomed", 1),
        ("failed", "doomed", 1, True),
        ("start", "doomed", 2),
        ("process", "doomed", 2),
        ("failed", "doomed", 2, False),
    ]


@pytest.mark.parametrize("broken", ["on_start", "on_complete", "on_failed"])
async def test_a_failing_hook_does_not_fail_the_job(stack: Stack, broken: str) -> None:
    app = stack.app()
    recorder = Recorder(app, "error")
    runs: list[int] = []

    class Fragile(Handler):
        name = "fragile"
        attempts = 2
        backoff = Backoff.fixed(0.01)

        async def on_start(self, ctx: JobContext) -> None:
            if broken == "on_start":
                raise RuntimeError("on_start hook bug")

        async def process(self, ctx: JobContext, payload: Any) -> Any:
            runs.append(ctx.job.attempts)
            if ctx.job.attempts == 1:
                raise Flaky("first attempt fails")
            return "done"

        async def on_complete(self, ctx: JobContext, result: Any) -> None:
            if broken == "on_complete":
                raise RuntimeError("on_complete hook bug")

        async def on_failed(self, ctx: JobContext, exc: BaseException, will_retry: bool) -> None:
            if broken == "on_failed":
                raise RuntimeError("on_failed hook bug")

    app.register(Fragile())
    job = await app.enqueue("fragile")
    async with running(app):
        assert await job.wait(timeout=10) == "done"
    assert runs == [1, 2]
    errors = recorder.of("error")
    assert errors, "a failing hook is reported as an error event"
    assert all(broken in d["where"] for d in errors)
    assert all(f"{broken} hook bug" in str(d["error"]) for d in errors)


async def test_events_of_a_successful_and_a_dead_job(stack: Stack) -> None:
    app = stack.app()
    names = (
        "enqueued",
        "active",
        "completed",
        "failed",
        "retrying",
        "dead",
        "worker_started",
        "worker_stopped",
    )
    recorder = Recorder(app, *names)

    @app.task("ok")
    async def ok(ctx: JobContext) -> int:
        return 7

    @app.task("bad", attempts=2, backoff=Backoff.fixed(0.01))
    async def bad(ctx: JobContext) -> None:
        raise Flaky("bad")

    good = await ok.enqueue()
    doomed = await bad.enqueue()
    async with running(app, worker_id="w-events") as worker:
        await settled(good)
        await settled(doomed)
    assert recorder.names(good.id) == ["enqueued", "active", "completed"]
    assert recorder.names(doomed.id) == [
        "enqueued",
        "active",
        "failed",
        "retrying",
        "active",
        "failed",
        "dead",
    ]
    (completed,) = recorder.of("completed")
    assert completed["result"] == 7
    assert completed["duration"] >= 0
    assert all(d["worker_id"] == worker.id for d in recorder.of("active"))
    assert [d["worker_id"] for d in recorder.of("worker_started")] == ["w-events"]
    assert [d["worker_id"] for d in recorder.of("worker_stopped")] == ["w-events"]
    assert recorder.names()[0] == "enqueued"
    assert recorder.names()[-1] == "worker_stopped"
    (dead,) = recorder.of("dead")
    assert dead["reason"] == "error"
    assert dead["error"].message == "bad"


async def test_a_failing_event_listener_does_not_break_the_worker(stack: Stack) -> None:
    app = stack.app()
    seen: list[str] = []

    def broken(event: str, **data: Any) -> None:
        raise RuntimeError("listener bug")

    async def async_listener(event: str, **data: Any) -> None:
        await asyncio.sleep(0)
        seen.append(event)

    app.on("active", broken)
    app.on("completed", broken)
    app.on("completed", async_listener)

    @app.task("fine")
    async def fine(ctx: JobContext) -> str:
        return "fine"

    job = await fine.enqueue()
    async with running(app):
        assert await job.wait(timeout=10) == "fine"
    assert seen == ["completed"]  # awaited by the time the worker stopped


async def test_cancelled_error_raised_by_the_handler_itself_is_an_error(stack: Stack) -> None:
    """A CancelledError that no one asked for (a library leaked it) is an
    ordinary failed attempt, not a run the worker silently drops to the reaper."""
    app = stack.app()
    recorder = Recorder(app, "failed", "stalled")

    @app.task("leaks.cancel", attempts=2, backoff=Backoff.fixed(0.01))
    async def leaks_cancel(ctx: JobContext) -> None:
        raise asyncio.CancelledError("leaked by a library")

    @app.task("after.leak")
    async def after_leak(ctx: JobContext) -> str:
        return "still working"

    job = await leaks_cancel.enqueue()
    async with running(app):
        failed = await settled(job)
        follow = await after_leak.enqueue()
        assert await follow.wait(timeout=10) == "still working"
    assert failed.state is JobState.FAILED
    assert failed.failure_reason is FailureReason.ERROR
    assert failed.attempts == 2
    assert failed.stalls == 0
    assert [e.type for e in failed.errors] == ["CancelledError", "CancelledError"]
    assert [d["will_retry"] for d in recorder.of("failed")] == [True, False]
    assert recorder.of("stalled") == []

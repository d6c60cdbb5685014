"""The worker runs handlers: async and sync, results, waiting, progress, bad input."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from worker_fixtures import (
    Recorder,
    Stack,
    eventually,
    released,
    running,
    settled,
)

from conveyor import FailureReason, JobCancelled, JobFailed, JobState, Priority, QueueFull
from conveyor.backends.base import ClaimRequest, ClaimResult, Settlement, SettleResult
from conveyor.context import JobContext
from conveyor.task import Handler


async def test_async_handler_runs_on_the_loop_and_its_result_is_stored(stack: Stack) -> None:
    app = stack.app()
    threads: list[int] = []

    @app.task("add")
    async def add(ctx: JobContext, a: int, b: int) -> dict[str, int]:
        threads.append(threading.get_ident())
        return {"sum": a + b}

    job = await add.enqueue(a=2, b=3)
    assert job.state is JobState.WAITING
    assert await app.drain() == 1
    assert threads == [threading.get_ident()]
    done = await app.get_job(job.id)
    assert done is not None
    assert done.state is JobState.COMPLETED
    assert done.result == {"sum": 5}
    assert done.attempts == 1
    assert done.finished_at is not None
    assert await job.wait(timeout=1) == {"sum": 5}


async def test_sync_handler_runs_in_a_thread_not_the_loop(stack: Stack) -> None:
    app = stack.app()
    seen: list[tuple[int, str]] = []

    @app.task("sync.add")
    def add(ctx: JobContext, a: int, b: int) -> int:
        seen.append((threading.get_ident(), threading.current_thread().name))
        return a + b

    job = await add.enqueue(a=20, b=22)
    await app.drain()
    assert await job.wait(timeout=1) == 42
    ((ident, name),) = seen
    assert ident != threading.get_ident()
    assert name.startswith("conveyor-job")


async def test_class_handler_with_sync_process(stack: Stack) -> None:
    app = stack.app()

    class Echo(Handler):
        name = "echo"

        def process(self, ctx: JobContext, payload: Any) -> Any:
            return {"echo": payload, "thread": threading.get_ident()}

    app.register(Echo())
    job = await app.enqueue("echo", {"x": [1, 2]})
    await app.drain()
    result = await job.wait(timeout=1)
    assert result["echo"] == {"x": [1, 2]}
    assert result["thread"] != threading.get_ident()


async def test_handler_sees_its_job_and_worker(stack: Stack) -> None:
    app = stack.app()
    seen: dict[str, Any] = {}

    @app.task("inspect", attempts=4, priority=3)
    async def inspect_job(ctx: JobContext, value: int) -> None:
        seen.update(
            id=ctx.job.id,
            task=ctx.job.task,
            queue=ctx.job.queue,
            payload=ctx.job.payload,
            attempts=ctx.job.attempts,
            max_attempts=ctx.job.max_attempts,
            priority=ctx.job.priority,
            tenant=ctx.job.tenant,
            metadata=ctx.job.metadata,
            worker_id=ctx.worker_id,
        )

    job = await app.enqueue(
        "inspect", {"value": 1}, tenant="org-1", metadata={"correlation_id": "req-9"}
    )
    async with running(app, worker_id="w-inspect"):
        await settled(job)
    assert seen == {
        "id": job.id,
        "task": "inspect",
        "queue": "default",
        "payload": {"value": 1},
        "attempts": 1,
        "max_attempts": 4,
        "priority": 3,
        "tenant": "org-1",
        "metadata": {"correlation_id": "req-9"},
        "worker_id": "w-inspect",
    }


async def test_none_result_and_no_payload(stack: Stack) -> None:
    app = stack.app()

    @app.task("noop")
    async def noop(ctx: JobContext) -> None:
        return None

    backend = await app.connect()
    sent: list[Settlement] = []
    settle = backend.settle_jobs

    async def recording(settlements: Sequence[Settlement]) -> SettleResult:
        sent.extend(settlements)
        return await settle(settlements)

    async def recording_with_claim(
        settlements: Sequence[Settlement], request: ClaimRequest
    ) -> tuple[SettleResult, ClaimResult]:
        sent.extend(settlements)
        return await settle_and_claim(settlements, request)

    settle_and_claim = backend.settle_and_claim
    backend.settle_jobs = recording  # type: ignore[method-assign]
    # A worker waiting for work sends its outcomes with a claim.
    backend.settle_and_claim = recording_with_claim  # type: ignore[method-assign]
    job = await app.enqueue("noop")
    await app.drain()
    assert await job.wait(timeout=1) is None
    assert (await settled(job)).state is JobState.COMPLETED
    # Nothing stored: no result reads back as None. (The memory store's
    # settle_and_claim is the contract's default: it calls settle_jobs too.)
    assert {s.job_id: s.result for s in sent} == {job.id: None}


async def test_wait_raises_job_failed_with_the_job(stack: Stack) -> None:
    app = stack.app()

    @app.task("fails", attempts=1)
    async def fails(ctx: JobContext) -> None:
        raise ValueError("nope")

    job = await fails.enqueue()
    await app.drain()
    with pytest.raises(JobFailed, match=r"error.*ValueError: nope") as info:
        await job.wait(timeout=1)
    assert info.value.job.state is JobState.FAILED
    assert info.value.job.failure_reason is FailureReason.ERROR


async def test_wait_raises_job_cancelled(stack: Stack) -> None:
    app = stack.app()

    @app.task("never")
    async def never(ctx: JobContext) -> None:
        raise AssertionError("a cancelled job must not run")

    job = await never.enqueue()
    await app.cancel(job.id)
    with pytest.raises(JobCancelled) as info:
        await job.wait(timeout=1)
    assert info.value.job.id == job.id
    assert await app.drain() == 0


async def test_wait_times_out_while_the_job_is_pending(stack: Stack) -> None:
    app = stack.app()

    @app.task("pending")
    async def pending(ctx: JobContext) -> None: ...

    job = await pending.enqueue()
    with pytest.raises(TimeoutError, match="still waiting"):
        await job.wait(timeout=0.1)


async def test_wait_returns_once_a_running_worker_finishes(stack: Stack) -> None:
    app = stack.app()

    @app.task("slowish")
    async def slowish(ctx: JobContext, n: int) -> int:
        await asyncio.sleep(0.05)
        return n * 10

    async with running(app):
        jobs = [await slowish.enqueue(n=n) for n in range(5)]
        results = await asyncio.gather(*(job.wait(timeout=10) for job in jobs))
    assert results == [0, 10, 20, 30, 40]


async def test_non_json_result_fails_the_attempt(stack: Stack) -> None:
    app = stack.app()

    @app.task("badresult", attempts=1)
    async def bad_result(ctx: JobContext) -> object:
        return object()

    job = await bad_result.enqueue()
    await app.drain()
    failed = await settled(job)
    assert failed.state is JobState.FAILED
    assert failed.error is not None
    assert failed.error.type == "SerializationError"


async def test_unknown_task_fails_at_once_without_a_grace(stack: Stack) -> None:
    app = stack.app(unknown_task_grace=0)

    @app.task("known")
    async def known(ctx: JobContext) -> str:
        return "ok"

    unknown = await app.enqueue("nobody.handles.this", {"x": 1}, attempts=5)
    fine = await known.enqueue()
    await app.drain()
    failed = await settled(unknown)
    assert failed.state is JobState.FAILED
    assert failed.failure_reason is FailureReason.UNKNOWN_TASK
    assert failed.attempts == 1
    assert failed.error is not None
    assert failed.error.type == "UnknownTask"
    assert "nobody.handles.this" in failed.error.message
    assert await fine.wait(timeout=1) == "ok"
    assert [j.id for j in await app.dlq.list(reason="unknown_task")] == [unknown.id]


async def test_validate_refusal_fails_invalid_after_one_attempt(stack: Stack) -> None:
    app = stack.app()
    processed: list[Any] = []

    class Strict(Handler):
        name = "strict"
        attempts = 5

        def validate(self, payload: Any) -> None:
            if "to" not in payload:
                raise ValueError("'to' is required")

        async def process(self, ctx: JobContext, payload: Any) -> Any:
            processed.append(payload)
            return "sent"

    app.register(Strict())
    recorder = Recorder(app, "dead", "retrying", "active")
    bad = await app.enqueue("strict", {"subject": "hi"})
    good = await app.enqueue("strict", {"to": "a@b.c"})
    await app.drain()
    failed = await settled(bad)
    assert failed.state is JobState.FAILED
    assert failed.failure_reason is FailureReason.INVALID
    assert failed.attempts == 1
    assert failed.error is not None
    assert failed.error.type == "ValueError"
    assert "'to' is required" in failed.error.message
    assert processed == [{"to": "a@b.c"}]
    assert await good.wait(timeout=1) == "sent"
    assert recorder.of("retrying") == []
    assert [d["reason"] for d in recorder.of("dead")] == ["invalid"]
    # Never retried later either: nothing left to run.
    assert await app.drain() == 0


async def test_payload_that_does_not_fit_the_signature_is_invalid(stack: Stack) -> None:
    app = stack.app()

    @app.task("greet", attempts=4)
    async def greet(ctx: JobContext, name: str) -> str:
        return f"hi {name}"

    @app.task("sync.greet", attempts=4)
    def sync_greet(ctx: JobContext, name: str) -> str:
        return f"hi {name}"

    wrong_key = await app.enqueue("greet", {"nom": "x"})
    missing = await app.enqueue("greet", {})
    extra = await app.enqueue("sync.greet", {"name": "x", "age": 3})
    ok = await app.enqueue("greet", {"name": "y"})
    await app.drain()
    for job in (wrong_key, missing, extra):
        failed = await settled(job)
        assert failed.state is JobState.FAILED, job.payload
        assert failed.failure_reason is FailureReason.INVALID, job.payload
        assert failed.attempts == 1
        assert failed.error is not None
        assert failed.error.type == "ValidationError"
    assert await ok.wait(timeout=1) == "hi y"


async def test_a_type_error_inside_the_handler_is_an_ordinary_error(stack: Stack) -> None:
    app = stack.app()
    runs: list[int] = []

    @app.task("buggy", attempts=2)
    async def buggy(ctx: JobContext, n: int) -> int:
        runs.append(n)
        return n + "1"  # type: ignore[operator]

    job = await buggy.enqueue(n=1)
    async with running(app):
        failed = await settled(job)
    assert failed.failure_reason is FailureReason.ERROR
    assert failed.attempts == 2
    assert runs == [1, 1]


async def test_corrupt_payload_fails_invalid_and_the_batch_goes_on(stack: Stack) -> None:
    app = stack.app()
    ran: list[int] = []

    @app.task("item")
    async def item(ctx: JobContext, n: int) -> int:
        ran.append(n)
        return n

    jobs = [await item.enqueue(n=n) for n in range(5)]
    await stack.corrupt_payload(app, jobs[2].id)
    assert await app.drain() == 5
    broken = await settled(jobs[2])
    assert broken.state is JobState.FAILED
    assert broken.failure_reason is FailureReason.INVALID
    assert broken.error is not None
    assert "payload" in broken.error.message
    assert sorted(ran) == [0, 1, 3, 4]
    for n in (0, 1, 3, 4):
        assert await jobs[n].wait(timeout=1) == n


async def test_async_progress_is_visible_on_the_job_and_as_an_event(stack: Stack) -> None:
    app = stack.app()
    recorder = Recorder(app, "progress")
    proceed = asyncio.Event()

    @app.task("report")
    async def report(ctx: JobContext) -> str:
        await ctx.progress(50, phase="sending")
        await proceed.wait()
        await ctx.progress(100, phase="done", sent=3)
        return "ok"

    job = await report.enqueue()
    async with running(app):
        (event,) = await recorder.wait_for("progress")
        assert event["job"].id == job.id
        assert event["progress"] == {"percent": 50, "phase": "sending"}

        async def saved() -> bool:
            current = await app.get_job(job.id)
            return current is not None and current.progress == {"percent": 50, "phase": "sending"}

        await eventually(saved, message="progress saved while the job runs")
        current = await app.get_job(job.id)
        assert current is not None
        assert current.state is JobState.ACTIVE
        proceed.set()
        done = await settled(job)
    assert done.progress == {"percent": 100, "phase": "done", "sent": 3}
    assert [e["progress"]["percent"] for e in recorder.of("progress")] == [50, 100]


async def test_sync_handler_reports_progress_without_await(stack: Stack) -> None:
    app = stack.app()
    recorder = Recorder(app, "progress")
    proceed = threading.Event()

    @app.task("sync.report")
    def report(ctx: JobContext) -> str:
        ctx.progress(30, phase="halfway")
        assert proceed.wait(10)
        ctx.progress(90)
        return "ok"

    job = await report.enqueue()

    async def saved() -> bool:
        current = await app.get_job(job.id)
        return current is not None and current.progress == {"percent": 30, "phase": "halfway"}

    with released(proceed):
        async with running(app):
            (event,) = await recorder.wait_for("progress")
            assert event["progress"] == {"percent": 30, "phase": "halfway"}
            await eventually(saved, message="sync progress saved while the job runs")
            proceed.set()
            done = await settled(job)
    assert done.state is JobState.COMPLETED
    assert done.progress == {"percent": 90}


async def test_enqueue_sync_from_a_plain_thread(stack: Stack) -> None:
    app = stack.app()

    @app.task("double")
    async def double(ctx: JobContext, n: int) -> int:
        return 2 * n

    results: list[Any] = []
    errors: list[BaseException] = []

    def producer() -> None:
        try:
            results.append(app.enqueue_sync("double", {"n": 21}))
            results.append(double.enqueue_sync(n=5))
        except BaseException as exc:  # reported to the test below
            errors.append(exc)

    async with running(app):
        thread = threading.Thread(target=producer)
        thread.start()
        await asyncio.to_thread(thread.join, 10)
        assert errors == []
        assert [job.state for job in results] == [JobState.WAITING] * 2
        values = [await job.wait(timeout=10) for job in results]
    assert values == [42, 10]


async def test_enqueue_sync_applies_the_task_defaults_and_emits_enqueued(stack: Stack) -> None:
    app = stack.app()
    recorder = Recorder(app, "enqueued")

    @app.task("mail.send", queue="emails", priority=Priority.HIGH, attempts=5)
    async def send(ctx: JobContext, to: str) -> str:
        return to

    async with running(app):
        job = await asyncio.to_thread(app.enqueue_sync, "mail.send", {"to": "a@b.c"})
        assert await job.wait(timeout=10) == "a@b.c"
    assert job.queue == "emails"
    assert job.priority == Priority.HIGH
    assert job.max_attempts == 5
    assert [d["job"].id for d in recorder.of("enqueued")] == [job.id]


async def test_enqueue_sync_without_a_running_app_applies_the_task_defaults(
    stack: Stack,
) -> None:
    """A sync script whose app never connected: the private portal must still
    know the app's tasks and queues."""
    producer = stack.app()
    producer.queue("emails", max_size=1)

    @producer.task("mail.send", queue="emails", priority=Priority.HIGH, attempts=5)
    def send(ctx: JobContext, to: str) -> str:
        return to

    def script() -> Any:
        first = producer.enqueue_sync("mail.send", {"to": "a@b.c"})
        with pytest.raises(QueueFull):
            producer.enqueue_sync("mail.send", {"to": "x@y.z"})
        return first

    job = await asyncio.to_thread(script)
    assert job.queue == "emails"
    assert job.priority == Priority.HIGH
    assert job.max_attempts == 5
    consumer = stack.app()
    consumer.task("mail.send", queue="emails")(send.handler.fn)  # type: ignore[attr-defined]
    async with running(consumer, queues=["emails"]):
        assert await consumer.wait_for_job(job.id, timeout=10)
    stored = await consumer.get_job(job.id)
    assert stored is not None
    assert stored.result == "a@b.c"


async def test_enqueue_sync_on_a_private_memory_store() -> None:
    """``Conveyor("memory://")`` is what tests use: a job enqueued from another
    thread must land in the app's own store, not a second private one."""
    from conveyor.app import Conveyor

    app = Conveyor("memory://", poll_interval="0.05s")
    enqueued = Recorder(app, "enqueued")

    @app.task("double")
    async def double(ctx: JobContext, n: int) -> int:
        return 2 * n

    try:
        await app.connect()
        job = await asyncio.to_thread(app.enqueue_sync, "double", {"n": 4})
        assert await app.count_jobs() == 1
        assert [d["job"].id for d in enqueued.of("enqueued")] == [job.id]
        assert await app.drain() == 1
        assert await job.wait(timeout=1) == 8
    finally:
        await app.close()


async def test_enqueue_sync_from_a_sync_handler(stack: Stack) -> None:
    app = stack.app()

    @app.task("child")
    async def child(ctx: JobContext, n: int) -> int:
        return n + 1

    @app.task("sync.parent")
    def parent(ctx: JobContext, n: int) -> str:
        return app.enqueue_sync("child", {"n": n}).id

    job = await parent.enqueue(n=1)
    async with running(app):
        child_id = await job.wait(timeout=10)
        child_job = await app.get_job(child_id)
        assert child_job is not None
        assert await child_job.wait(timeout=10) == 2


async def test_with_options_enqueues_with_those_options(stack: Stack) -> None:
    app = stack.app()

    @app.task("opt")
    async def opt(ctx: JobContext, n: int) -> int:
        return n

    job = await opt.with_options(delay=60, priority=7, tenant="org-3").enqueue(n=1)
    plain = await opt.enqueue(n=2)
    assert job.state is JobState.DELAYED
    assert job.priority == 7
    assert job.tenant == "org-3"
    assert plain.state is JobState.WAITING
    assert plain.priority == 0
    assert await opt(None, n=5) == 5  # calling the task calls the function directly


async def test_sync_hooks_run_in_the_thread_pool(stack: Stack) -> None:
    """Plain ``def`` hooks, like a plain ``process``, must not block the loop."""
    app = stack.app()
    threads: dict[str, int] = {}

    class SyncHooks(Handler):
        name = "sync.hooks"
        attempts = 2

        def on_start(self, ctx: JobContext) -> None:  # type: ignore[override]
            threads.setdefault("on_start", threading.get_ident())

        def process(self, ctx: JobContext, payload: Any) -> Any:
            threads["process"] = threading.get_ident()
            if ctx.job.attempts == 1:
                raise RuntimeError("once")
            return "ok"

        def on_failed(  # type: ignore[override]
            self, ctx: JobContext, exc: BaseException, will_retry: bool
        ) -> None:
            threads["on_failed"] = threading.get_ident()

        def on_complete(self, ctx: JobContext, result: Any) -> None:  # type: ignore[override]
            threads["on_complete"] = threading.get_ident()

    app.register(SyncHooks())
    job = await app.enqueue("sync.hooks")
    async with running(app):
        assert await job.wait(timeout=10) == "ok"
    loop_thread = threading.get_ident()
    assert set(threads) == {"on_start", "process", "on_failed", "on_complete"}
    assert {name for name, ident in threads.items() if ident == loop_thread} == set()

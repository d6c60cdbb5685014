"""Workflows run by a real worker: chains, groups, chords, depends_on, dependency
results, failure policies, cancel, and the checks made before anything is stored."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from worker_fixtures import Stack, running, settled

from conveyor import (
    Conveyor,
    FailureReason,
    InvalidWorkflow,
    JobFailed,
    JobState,
    Task,
    WorkflowState,
    chain,
    chord,
    group,
)
from conveyor.context import JobContext
from conveyor.job import DependencyPolicy, Job


@dataclass
class Tasks:
    number: Task
    total: Task
    double: Task
    boom: Task


def arithmetic(stack: Stack) -> tuple[Conveyor, Tasks]:
    app = stack.app()

    @app.task("number")
    async def number(ctx: JobContext, n: int) -> int:
        return n

    @app.task("total")
    async def total(ctx: JobContext) -> int:
        return sum(r for r in await ctx.dependency_results() if r is not None)

    @app.task("double")
    async def double(ctx: JobContext) -> int:
        (before,) = await ctx.dependency_results()
        return int(before) * 2

    @app.task("boom")
    async def boom(ctx: JobContext) -> None:
        raise RuntimeError("boom")

    return app, Tasks(number, total, double, boom)


async def test_a_chain_passes_each_result_on(stack: Stack) -> None:
    app, t = arithmetic(stack)
    workflow = await app.start(chain(t.number.step(n=3), t.double.step(), t.double.step()))
    assert [job.state for job in workflow.jobs] == [
        JobState.WAITING,
        JobState.BLOCKED,
        JobState.BLOCKED,
    ]
    assert workflow.state is WorkflowState.RUNNING
    async with running(app):
        assert await workflow.wait(timeout=20) == 12
    assert workflow.state is WorkflowState.COMPLETED
    found = await app.get_workflow(workflow.id)
    assert found is not None
    assert [job.result for job in found.jobs] == [3, 6, 12]
    assert all(job.workflow_id == workflow.id for job in found.jobs)


async def test_a_chord_reads_every_result_of_its_group_in_order(stack: Stack) -> None:
    app, t = arithmetic(stack)
    members = [t.number.step(n=n) for n in range(1, 51)]
    workflow = await app.start(chord(group(*members), t.total.step()))
    assert len(workflow.jobs) == 51
    async with running(app, concurrency=8):
        assert await workflow.wait(timeout=30) == sum(range(1, 51))
    callback = workflow.jobs[-1]
    assert callback.depends_on == tuple(job.id for job in workflow.jobs[:-1])


async def test_nesting_a_group_of_chains_into_a_chord(stack: Stack) -> None:
    app, t = arithmetic(stack)
    flow = chord(
        [chain(t.number.step(n=1), t.double.step()), chain(t.number.step(n=5), t.double.step())],
        t.total.step(),
    )
    workflow = await app.start(flow)
    async with running(app):
        assert await workflow.wait(timeout=20) == 12  # 2 + 10


async def test_a_failed_step_cancels_what_waits_on_it(stack: Stack) -> None:
    app, t = arithmetic(stack)
    workflow = await app.start(
        chord(group(t.number.step(n=1), app.step("boom", attempts=1)), t.total.step())
    )
    async with running(app):
        with pytest.raises(JobFailed):
            await workflow.wait(timeout=20)
    assert workflow.state is WorkflowState.FAILED
    callback = workflow.jobs[-1]
    assert callback.state is JobState.CANCELLED
    assert callback.failure_reason is FailureReason.DEPENDENCY_FAILED


async def test_depends_on_with_policy_run(stack: Stack) -> None:
    app, t = arithmetic(stack)
    good = await t.number.enqueue(n=4)
    bad = await app.enqueue("boom", attempts=1)
    after = await app.enqueue(
        "total", depends_on=[good, bad.id], on_dependency_failure=DependencyPolicy.RUN
    )
    assert after.state is JobState.BLOCKED
    async with running(app):
        done = await app.wait_for_job(after.id, timeout=20)
    assert done.state is JobState.COMPLETED
    assert done.result == 4  # the failed dependency's result reads as None


async def test_a_callback_reads_its_results_a_page_at_a_time(stack: Stack) -> None:
    """iter_dependency_results gives what dependency_results gives, in the same
    order with None for a failed member, reading the store one page per call."""
    app, t = arithmetic(stack)
    seen: dict[str, list[object]] = {}

    @app.task("collect")
    async def collect(ctx: JobContext) -> int:
        seen["paged"] = [r async for r in ctx.iter_dependency_results(page_size=4)]
        seen["whole"] = await ctx.dependency_results()
        return len(seen["paged"])

    members = [t.number.step(n=n) for n in range(1, 11)]
    members.insert(5, app.step("boom", attempts=1))
    workflow = await app.start(
        chord(group(*members), app.step("collect", on_dependency_failure=DependencyPolicy.RUN))
    )
    async with running(app, concurrency=4):
        with pytest.raises(JobFailed):  # the workflow ends failed: one member did
            await workflow.wait(timeout=30)
    assert workflow.jobs[-1].state is JobState.COMPLETED
    assert seen["paged"] == [1, 2, 3, 4, 5, None, 6, 7, 8, 9, 10]
    assert seen["paged"] == seen["whole"]

    # One backend read per page of the callback's dependencies, on this store.
    backend = await app.connect()
    reads: list[int] = []

    async def read_jobs(ids: Sequence[str]) -> list[Job]:
        reads.append(len(ids))
        return await backend.get_jobs(ids)

    ctx = JobContext(workflow.jobs[-1], "reader", read_jobs=read_jobs)
    assert [r async for r in ctx.iter_dependency_results(page_size=4)] == seen["whole"]
    assert reads == [4, 4, 3]
    assert [r async for r in ctx.iter_dependency_results(page_size=500)] == seen["whole"]
    assert reads[3:] == [11]
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="page_size"):
            [r async for r in ctx.iter_dependency_results(page_size=bad)]  # type: ignore[arg-type]
    alone = JobContext(workflow.jobs[0], "reader", read_jobs=read_jobs)
    assert [r async for r in alone.iter_dependency_results()] == []
    assert reads[4:] == []  # no dependencies: no read at all


async def test_cancel_stops_every_unfinished_step(stack: Stack) -> None:
    app, t = arithmetic(stack)
    workflow = await app.start(chain(t.number.step(n=1), t.double.step(), t.double.step()))
    assert await workflow.cancel() == 3
    assert workflow.state is WorkflowState.CANCELLED
    assert all(job.failure_reason is None for job in workflow.jobs)


async def test_bad_workflows_store_nothing(stack: Stack) -> None:
    app, t = arithmetic(stack)
    with pytest.raises(InvalidWorkflow, match="nosuch"):
        await app.start(chain(t.number.step(n=1), app.step("nosuch")))
    with pytest.raises(InvalidWorkflow, match="no-such-job"):
        await app.start(chain(t.number.step(n=1), app.step("total", depends_on=["no-such-job"])))
    with pytest.raises(InvalidWorkflow):
        group()
    with pytest.raises(ValueError, match="on_dependency_failure"):
        await app.enqueue("total", depends_on=[], on_dependency_failure="sometimes")
    with pytest.raises(TypeError, match="depends_on"):
        await app.enqueue("total", depends_on="one-id")
    assert await app.count_jobs() == 0


async def test_start_sync_from_sync_code(stack: Stack) -> None:
    app, t = arithmetic(stack)
    workflow = app.start_sync(chain(t.number.step(n=2), t.double.step()))
    assert len(workflow.jobs) == 2
    assert workflow.jobs[1].depends_on == (workflow.jobs[0].id,)


async def test_retrying_a_failed_step_from_the_dead_letter_queue_resumes(stack: Stack) -> None:
    """A diamond whose middle step fails once: retried, the workflow completes,
    and the join reads the copy's result."""
    app, t = arithmetic(stack)
    calls: list[int] = []

    @app.task("flaky")
    async def flaky(ctx: JobContext) -> int:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("not this time")
        (before,) = await ctx.dependency_results()
        return int(before) * 10

    root = t.number.step(n=3)
    workflow = await app.start(
        chain(root, group(t.double.step(), app.step("flaky", attempts=1)), t.total.step())
    )
    async with running(app):
        with pytest.raises(JobFailed):
            await workflow.wait(timeout=20)
        failed = next(job for job in workflow.jobs if job.task == "flaky")
        join = workflow.jobs[-1]
        assert join.state is JobState.CANCELLED
        assert join.failure_reason is FailureReason.DEPENDENCY_FAILED

        copy = await app.dlq.retry(failed.id)
        assert copy.workflow_id == workflow.id
        assert await workflow.wait(timeout=20) == 36  # 6 + 30
    assert workflow.state is WorkflowState.COMPLETED
    done = {job.task: job for job in workflow.jobs}
    assert done["flaky"].id == copy.id
    assert done["total"].depends_on[1] == copy.id
    assert len(calls) == 2


async def test_each_step_of_a_chain_comes_in_one_claim(stack: Stack) -> None:
    """After a claim that came back short, the worker claims again only once the
    outcomes it sent are answered: the settle that released a chain's next step
    is stored by then, so that claim takes it. A claim sent meanwhile would come
    back empty (the step still blocked) and need a wake-up and one more claim."""
    # Polls far apart: an empty claim in the window is a race, not a poll.
    app = stack.app(poll_interval="10s")

    @app.task("step")
    async def step(ctx: JobContext) -> None:
        return None

    steps = 30
    claims: list[int] = []

    def on_claimed(event: str, worker_id: str, count: int, seconds: float) -> None:
        claims.append(count)

    async with running(app):
        # The worker's first claims are behind it: it waits for work.
        await settled(await app.enqueue("step"))
        app.on("claimed", on_claimed)
        workflow = await app.start(chain(*(app.step("step") for _ in range(steps))))
        await workflow.wait(timeout=20)
        app.events.off("claimed", on_claimed)
    assert workflow.state is WorkflowState.COMPLETED
    assert sum(claims) <= steps
    # One claim per step; a few more when a wake-up echoes a release already taken.
    assert claims.count(0) <= steps // 6, claims

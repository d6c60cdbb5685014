"""A worker that does not know a job's task (a rolling deploy: old workers, new
tasks) gives the job back for ``unknown_task_grace``, delayed and without
spending an attempt, so a worker that knows the task runs it; after the grace
the job fails ``unknown_task``."""

from __future__ import annotations

import logging

import pytest
from worker_fixtures import Stack, eventually, running, settled

from conveyor import FailureReason, JobState
from conveyor.context import JobContext
from conveyor.worker.executor import unknown_task_delay


async def test_an_old_worker_gives_new_tasks_back_for_a_new_worker(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    old = stack.app(unknown_task_grace="1m")
    new = stack.app()

    @old.task("old.task")
    async def old_task(ctx: JobContext) -> str:
        return "old"

    @new.task("new.task", attempts=1)
    async def new_task(ctx: JobContext, n: int) -> int:
        return n * 10

    jobs = [await new_task.enqueue(n=n) for n in (1, 2)]
    ids = [job.id for job in jobs]

    async def all_given_back() -> bool:
        stored = await new.backend.get_jobs(ids)
        return all(j.state is JobState.DELAYED and j.started_at is not None for j in stored)

    with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
        async with running(old):
            await eventually(all_given_back, message="the old worker gave the jobs back")
    for job in await new.backend.get_jobs(ids):
        assert job.attempts == 0, "a job given back spent an attempt"
        assert job.failure_reason is None
        assert job.errors == []
    warnings = [r.getMessage() for r in caplog.records if "new.task" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once per task, not once per job
    assert "unknown_task_grace" in warnings[0]

    async with running(new):
        done = [await settled(job) for job in jobs]
    assert [job.state for job in done] == [JobState.COMPLETED, JobState.COMPLETED]
    assert [job.result for job in done] == [10, 20]
    assert [job.attempts for job in done] == [1, 1]


async def test_after_the_grace_the_job_fails_unknown_task(stack: Stack) -> None:
    old = stack.app(unknown_task_grace="1.5s")
    new = stack.app()

    @old.task("old.task")
    async def old_task(ctx: JobContext) -> str:
        return "old"

    @new.task("new.task", attempts=5)
    async def new_task(ctx: JobContext) -> str:
        return "new"

    job = await new_task.enqueue()
    async with running(old):
        failed = await settled(job, timeout=20)
    assert failed.state is JobState.FAILED
    assert failed.failure_reason is FailureReason.UNKNOWN_TASK
    assert failed.attempts == 1  # the releases before it gave theirs back
    assert failed.error is not None
    assert failed.error.type == "UnknownTask"
    assert "new.task" in failed.error.message
    # Failed by a claim that came after the grace, not before it.
    assert failed.started_at is not None
    assert failed.started_at - failed.created_at >= 1.5
    assert [j.id for j in await old.dlq.list(reason="unknown_task")] == [job.id]


def test_the_delays_grow_from_one_second_to_thirty_and_end_at_the_grace() -> None:
    assert unknown_task_delay(0.0, 300) == 1.0
    assert unknown_task_delay(0.5, 300) == 1.0
    assert unknown_task_delay(4.0, 300) == 4.0
    assert unknown_task_delay(100.0, 300) == 30.0
    assert unknown_task_delay(299.0, 300) == pytest.approx(1.0)
    assert unknown_task_delay(1.0, 1.5) == pytest.approx(0.5)
    assert unknown_task_delay(1.5 - 1e-6, 1.5) == 0.01

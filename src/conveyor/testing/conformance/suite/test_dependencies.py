"""Dependencies between jobs: ``blocked`` until what a job depends on finishes,
released or cancelled in the same operation that finishes its last dependency."""

from __future__ import annotations

import asyncio

import pytest

from conveyor import serialization
from conveyor.backends.base import Backend, JobFilter, Outcome
from conveyor.errors import InvalidWorkflow
from conveyor.job import DependencyPolicy, FailureReason, Job, JobState

from .helpers import (
    claim,
    claim_exact,
    enqueue,
    enqueue_one,
    error,
    fetch,
    ids,
    make_finished,
    new_job,
    settle_ok,
)

RUN = DependencyPolicy.RUN


async def complete(backend: Backend, job: Job, result: object = "ok") -> None:
    running = await claim_exact(backend, job)
    await settle_ok(backend, running, Outcome.COMPLETE, result=serialization.dumps(result))


async def fail(backend: Backend, job: Job) -> None:
    running = await claim_exact(backend, job)
    await settle_ok(
        backend, running, Outcome.FAIL, error=error(), failure_reason=FailureReason.ERROR
    )


async def state_of(backend: Backend, job: Job) -> JobState:
    return (await fetch(backend, job.id)).state


async def test_a_job_waits_blocked_until_its_dependency_completes(backend: Backend) -> None:
    first = await enqueue_one(backend, "a", queue="q")
    (then,) = await enqueue(backend, new_job("b", "q", depends_on=[first.id], workflow_id="w1"))
    assert then.state is JobState.BLOCKED
    assert then.depends_on == (first.id,)
    assert then.workflow_id == "w1"
    claimed = (await claim(backend, ["q"])).jobs
    assert ids(claimed) == [first.id]  # never the blocked one
    assert await state_of(backend, then) is JobState.BLOCKED
    assert (await backend.queue_counts())["q"]["blocked"] == 1
    assert ids(await backend.list_jobs(JobFilter(states=[JobState.BLOCKED]))) == [then.id]
    assert (await claim(backend, ["q"])).jobs == []  # nothing due while it is blocked

    await settle_ok(backend, claimed[0], Outcome.COMPLETE)
    released = await fetch(backend, then.id)
    assert released.state is JobState.WAITING
    assert released.run_at <= await backend.now()
    assert ids((await claim(backend, ["q"])).jobs) == [then.id]


async def test_a_job_with_several_dependencies_waits_for_the_last(backend: Backend) -> None:
    first = await enqueue_one(backend, "a")
    second = await enqueue_one(backend, "b")
    (joined,) = await enqueue(backend, new_job("c", depends_on=[first.id, second.id]))
    await complete(backend, second)
    assert await state_of(backend, joined) is JobState.BLOCKED
    await complete(backend, first)
    assert await state_of(backend, joined) is JobState.WAITING


async def test_dependencies_within_one_batch(backend: Backend) -> None:
    root = new_job("root")
    left = new_job("left", depends_on=[root.id])
    right = new_job("right", depends_on=[root.id])
    join = new_job("join", depends_on=[left.id, right.id])
    stored = await enqueue(backend, root, left, right, join)
    assert [j.state for j in stored] == [JobState.WAITING] + [JobState.BLOCKED] * 3
    await complete(backend, stored[0])
    assert [await state_of(backend, j) for j in stored[1:]] == [
        JobState.WAITING,
        JobState.WAITING,
        JobState.BLOCKED,
    ]
    await complete(backend, stored[1])
    await complete(backend, stored[2])
    assert await state_of(backend, stored[3]) is JobState.WAITING


async def test_an_unknown_dependency_stores_nothing(backend: Backend) -> None:
    fine = new_job("fine")
    broken = new_job("broken", depends_on=["no-such-job"])
    with pytest.raises(InvalidWorkflow, match="no-such-job"):
        await enqueue(backend, fine, broken)
    assert await backend.count_jobs(JobFilter()) == 0
    later = new_job("later")
    forward = new_job("forward", depends_on=[later.id])  # later in the batch: unknown yet
    with pytest.raises(InvalidWorkflow):
        await enqueue(backend, forward, later)
    assert await backend.count_jobs(JobFilter()) == 0


async def test_dependencies_finished_before_the_enqueue(backend: Backend) -> None:
    done = await make_finished(backend, JobState.COMPLETED, "done")
    failed = await make_finished(backend, JobState.FAILED, "failed")
    cancelled = await make_finished(backend, JobState.CANCELLED, "cancelled")
    runs, refused, anyway, gone_wrong = await enqueue(
        backend,
        new_job("runs", depends_on=[done.id]),
        new_job("refused", depends_on=[done.id, failed.id]),
        new_job("anyway", depends_on=[failed.id, cancelled.id], on_dependency_failure=RUN),
        new_job("gone-wrong", depends_on=[cancelled.id]),
    )
    assert runs.state is JobState.WAITING
    assert anyway.state is JobState.WAITING
    for job in (refused, gone_wrong):
        stored = await fetch(backend, job.id)
        assert stored.state is JobState.CANCELLED
        assert stored.failure_reason is FailureReason.DEPENDENCY_FAILED
        assert stored.finished_at is not None


async def test_a_released_job_keeps_its_delay(backend: Backend) -> None:
    first = await enqueue_one(backend, "a")
    (later,) = await enqueue(backend, new_job("b", depends_on=[first.id], delay=3600))
    assert later.state is JobState.BLOCKED
    await complete(backend, first)
    stored = await fetch(backend, later.id)
    assert stored.state is JobState.DELAYED
    assert stored.run_at > await backend.now() + 3000


async def test_failure_cancels_dependents_transitively(backend: Backend) -> None:
    root = new_job("root")
    child = new_job("child", depends_on=[root.id])
    grandchild = new_job("grandchild", depends_on=[child.id])
    tolerant = new_job("tolerant", depends_on=[root.id], on_dependency_failure=RUN)
    stored = await enqueue(backend, root, child, grandchild, tolerant)
    await fail(backend, stored[0])
    for job in stored[1:3]:
        cancelled = await fetch(backend, job.id)
        assert cancelled.state is JobState.CANCELLED
        assert cancelled.failure_reason is FailureReason.DEPENDENCY_FAILED
    assert await state_of(backend, stored[3]) is JobState.WAITING
    assert await backend.count_jobs(JobFilter(states=[JobState.FAILED])) == 1  # root only


async def test_cancelling_a_dependency_cancels_its_dependents(backend: Backend) -> None:
    first = await enqueue_one(backend, "a")
    second, tolerant = await enqueue(
        backend,
        new_job("b", depends_on=[first.id]),
        new_job("c", depends_on=[first.id], on_dependency_failure=RUN),
    )
    await backend.cancel_job(first.id)
    assert (await fetch(backend, second.id)).failure_reason is FailureReason.DEPENDENCY_FAILED
    assert await state_of(backend, second) is JobState.CANCELLED
    assert await state_of(backend, tolerant) is JobState.WAITING


async def test_a_blocked_job_can_be_cancelled(backend: Backend) -> None:
    first = await enqueue_one(backend, "a")
    (blocked,) = await enqueue(backend, new_job("b", depends_on=[first.id]))
    cancelled = await backend.cancel_job(blocked.id)
    assert cancelled is not None
    assert cancelled.state is JobState.CANCELLED
    assert cancelled.failure_reason is None
    await complete(backend, first)
    assert await state_of(backend, blocked) is JobState.CANCELLED


async def test_a_stalled_dependency_that_fails_cancels_its_dependents(backend: Backend) -> None:
    first = await enqueue_one(backend, "a", max_attempts=1)
    (then,) = await enqueue(backend, new_job("b", depends_on=[first.id]))
    await claim(backend, lease=0.05)
    await asyncio.sleep(0.2)
    result = await backend.recover_stalled(max_stalled=3)
    assert ids(result.failed) == [first.id]  # no attempt left
    assert await state_of(backend, then) is JobState.CANCELLED


async def test_an_expired_dependency_cancels_its_dependents(backend: Backend) -> None:
    first = await enqueue_one(backend, "a", ttl=0.05)
    (then,) = await enqueue(backend, new_job("b", depends_on=[first.id]))
    await asyncio.sleep(0.2)
    result = await claim(backend)
    assert ids(result.expired) == [first.id]
    assert await state_of(backend, then) is JobState.CANCELLED


async def test_a_chain_of_a_thousand_cancels_in_one_operation(backend: Backend) -> None:
    jobs = [new_job("step")]
    for _ in range(999):
        jobs.append(new_job("step", depends_on=[jobs[-1].id]))
    stored = await enqueue(backend, *jobs)
    assert sum(j.state is JobState.BLOCKED for j in stored) == 999
    await backend.cancel_job(stored[0].id)
    cancelled = await backend.count_jobs(
        JobFilter(states=[JobState.CANCELLED], failure_reason=FailureReason.DEPENDENCY_FAILED)
    )
    assert cancelled == 999


async def test_concurrent_completions_release_a_join_exactly_once(backend: Backend) -> None:
    parents = [new_job("parent") for _ in range(20)]
    join = new_job("join", depends_on=[p.id for p in parents])
    await enqueue(backend, *parents, join)
    claimed = (await claim(backend, limit=100)).jobs
    assert len(claimed) == 20
    await asyncio.gather(*(settle_ok(backend, job, Outcome.COMPLETE) for job in claimed))
    stored = await fetch(backend, join.id)
    assert stored.state is JobState.WAITING
    released = (await claim(backend)).jobs
    assert ids(released) == [join.id]


async def test_workflow_jobs_are_listed_by_workflow(backend: Backend) -> None:
    first = new_job("a", workflow_id="wf-1")
    second = new_job("b", depends_on=[first.id], workflow_id="wf-1")
    await enqueue(backend, first, second, new_job("other", workflow_id="wf-2"))
    listed = await backend.list_jobs(JobFilter(workflow_id="wf-1"))
    assert sorted(ids(listed)) == sorted([first.id, second.id])
    assert await backend.count_jobs(JobFilter(workflow_id="wf-2")) == 1

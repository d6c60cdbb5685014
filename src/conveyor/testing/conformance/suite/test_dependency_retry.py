"""Retrying a failed dependency from the dead-letter queue: the copy takes the
original's place in its workflow, and what was cancelled because the original
failed waits again, on the copy."""

from __future__ import annotations

from conveyor import serialization
from conveyor.backends.base import Backend, Outcome
from conveyor.ids import new_id
from conveyor.job import DependencyPolicy, FailureReason, Job, JobState

from .helpers import claim_exact, enqueue, error, fetch, new_job, settle_ok

DEPENDENCY_FAILED = FailureReason.DEPENDENCY_FAILED


async def finish(backend: Backend, job: Job, outcome: Outcome) -> None:
    running = await claim_exact(backend, job)
    if outcome is Outcome.FAIL:
        failure = FailureReason.ERROR
        await settle_ok(backend, running, outcome, error=error(), failure_reason=failure)
    else:
        await settle_ok(backend, running, outcome, result=serialization.dumps("ok"))


async def chain(backend: Backend, workflow_id: str = "wf") -> list[Job]:
    """a -> b -> c in one workflow, a failed: b and c cancelled."""
    a = new_job("a", workflow_id=workflow_id)
    b = new_job("b", depends_on=[a.id], workflow_id=workflow_id)
    c = new_job("c", depends_on=[b.id], workflow_id=workflow_id)
    jobs = await enqueue(backend, a, b, c)
    await finish(backend, jobs[0], Outcome.FAIL)
    return jobs


async def test_retrying_a_failed_dependency_resumes_its_chain(backend: Backend) -> None:
    a, b, c = await chain(backend)
    for job in (b, c):
        cancelled = await fetch(backend, job.id)
        assert cancelled.state is JobState.CANCELLED
        assert cancelled.failure_reason is DEPENDENCY_FAILED

    copy = await backend.retry_failed(a.id, new_id())
    assert copy.state is JobState.WAITING
    assert copy.retry_of == a.id
    assert copy.workflow_id == "wf"
    assert copy.depends_on == ()
    resumed_b, resumed_c = await fetch(backend, b.id), await fetch(backend, c.id)
    assert resumed_b.state is JobState.BLOCKED
    assert resumed_b.depends_on == (copy.id,)
    assert resumed_b.failure_reason is None
    assert resumed_b.finished_at is None
    assert resumed_c.state is JobState.BLOCKED
    assert resumed_c.depends_on == (b.id,)
    assert (await backend.queue_counts())["default"]["blocked"] == 2

    await finish(backend, copy, Outcome.COMPLETE)
    assert (await fetch(backend, b.id)).state is JobState.WAITING
    assert (await fetch(backend, c.id)).state is JobState.BLOCKED
    await finish(backend, resumed_b, Outcome.COMPLETE)
    assert (await fetch(backend, c.id)).state is JobState.WAITING


async def test_the_copy_of_a_middle_step_keeps_its_dependencies(backend: Backend) -> None:
    """A diamond root -> (left, right) -> join whose left fails and is retried."""
    root = new_job("root", workflow_id="d")
    left = new_job("left", depends_on=[root.id], workflow_id="d")
    right = new_job("right", depends_on=[root.id], workflow_id="d")
    join = new_job("join", depends_on=[left.id, right.id], workflow_id="d")
    stored = await enqueue(backend, root, left, right, join)
    await finish(backend, stored[0], Outcome.COMPLETE)
    await finish(backend, stored[1], Outcome.FAIL)
    assert (await fetch(backend, join.id)).state is JobState.CANCELLED
    await finish(backend, stored[2], Outcome.COMPLETE)

    copy = await backend.retry_failed(left.id, new_id())
    assert copy.depends_on == (root.id,)
    assert copy.workflow_id == "d"
    assert copy.state is JobState.WAITING
    resumed = await fetch(backend, join.id)
    assert resumed.state is JobState.BLOCKED
    assert resumed.depends_on == (copy.id, right.id)

    await finish(backend, copy, Outcome.COMPLETE)
    assert (await fetch(backend, join.id)).state is JobState.WAITING


async def test_a_second_retry_of_a_failed_dependency_changes_nothing(backend: Backend) -> None:
    a, b, _ = await chain(backend)
    copy = await backend.retry_failed(a.id, new_id())
    await finish(backend, copy, Outcome.FAIL)
    # The copy failed in turn: b is cancelled again, because of the copy.
    assert (await fetch(backend, b.id)).failure_reason is DEPENDENCY_FAILED

    again = await backend.retry_failed(a.id, new_id())
    assert again.duplicate
    assert again.id == copy.id
    assert (await fetch(backend, b.id)).state is JobState.CANCELLED

    # Retrying the copy resumes b once more, now on the copy's copy.
    second = await backend.retry_failed(copy.id, new_id())
    resumed = await fetch(backend, b.id)
    assert resumed.state is JobState.BLOCKED
    assert resumed.depends_on == (second.id,)


async def test_a_dependent_cancelled_by_a_user_stays_cancelled(backend: Backend) -> None:
    a = new_job("a")
    kept = new_job("kept", depends_on=[a.id])
    dropped = new_job("dropped", depends_on=[a.id])
    after_dropped = new_job("after", depends_on=[dropped.id])
    stored = await enqueue(backend, a, kept, dropped, after_dropped)
    await backend.cancel_job(dropped.id)  # after_dropped: cancelled dependency_failed by it
    await finish(backend, stored[0], Outcome.FAIL)

    copy = await backend.retry_failed(a.id, new_id())
    assert (await fetch(backend, kept.id)).state is JobState.BLOCKED
    user_cancelled = await fetch(backend, dropped.id)
    assert user_cancelled.state is JobState.CANCELLED
    assert user_cancelled.failure_reason is None
    assert user_cancelled.depends_on == (a.id,)
    assert (await fetch(backend, after_dropped.id)).state is JobState.CANCELLED
    await finish(backend, copy, Outcome.COMPLETE)
    assert (await fetch(backend, kept.id)).state is JobState.WAITING


async def test_a_dependent_of_another_failed_job_stays_cancelled(backend: Backend) -> None:
    """Resumed, it would wait for good on the other failed job."""
    a, other = new_job("a"), new_job("other")
    both = new_job("both", depends_on=[a.id, other.id])
    after = new_job("after", depends_on=[both.id])
    stored = await enqueue(backend, a, other, both, after)
    await finish(backend, stored[1], Outcome.FAIL)
    await finish(backend, stored[0], Outcome.FAIL)

    await backend.retry_failed(a.id, new_id())
    for job in (both, after):
        still = await fetch(backend, job.id)
        assert still.state is JobState.CANCELLED
        assert still.failure_reason is DEPENDENCY_FAILED
    assert (await fetch(backend, both.id)).depends_on == (a.id, other.id)


async def test_a_completed_dependent_is_untouched(backend: Backend) -> None:
    """Policy run: the dependent ran although the original failed."""
    a = new_job("a")
    ran = new_job("ran", depends_on=[a.id], on_dependency_failure=DependencyPolicy.RUN)
    stored = await enqueue(backend, a, ran)
    await finish(backend, stored[0], Outcome.FAIL)
    await finish(backend, stored[1], Outcome.COMPLETE)

    await backend.retry_failed(a.id, new_id())
    done = await fetch(backend, ran.id)
    assert done.state is JobState.COMPLETED
    assert done.depends_on == (a.id,)


async def test_a_dependent_cancelled_at_enqueue_is_resumed_too(backend: Backend) -> None:
    """Enqueued after its dependency had failed: cancelled at once, because of it."""
    (a,) = await enqueue(backend, new_job("a"))
    await finish(backend, a, Outcome.FAIL)
    (late,) = await enqueue(backend, new_job("late", depends_on=[a.id]))
    assert late.state is JobState.CANCELLED

    copy = await backend.retry_failed(a.id, new_id())
    resumed = await fetch(backend, late.id)
    assert resumed.state is JobState.BLOCKED
    assert resumed.depends_on == (copy.id,)
    await finish(backend, copy, Outcome.COMPLETE)
    assert (await fetch(backend, late.id)).state is JobState.WAITING

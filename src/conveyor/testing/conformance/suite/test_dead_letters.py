"""The dead-letter queue: failed jobs listed, counted, retried, deleted and purged."""

from __future__ import annotations

import asyncio

import pytest

from conveyor.backends.base import Backend, JobFilter
from conveyor.errors import InvalidStateError, JobNotFound
from conveyor.ids import new_id
from conveyor.job import FailureReason, JobState

from .helpers import claim, claim_one, enqueue_one, fetch, make_failed, make_finished

FAILED = [JobState.FAILED]


async def dead_letters(backend: Backend) -> dict[str, str]:
    """Four failed jobs (and some others), by name -> id."""
    jobs = {
        "a_err": await make_failed(backend, "a", "q1", FailureReason.ERROR, tenant="org-1"),
        "a_timeout": await make_failed(backend, "a", "q2", FailureReason.TIMEOUT, tenant="org-2"),
        "b_err": await make_failed(backend, "b", "q1", FailureReason.ERROR, tenant="org-2"),
        "b_invalid": await make_failed(backend, "b", "q2", FailureReason.INVALID),
    }
    await make_finished(backend, JobState.COMPLETED, "a", "q1", tenant="org-1")
    await enqueue_one(backend, "a", "q1", tenant="org-1")
    return {name: job.id for name, job in jobs.items()}


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (JobFilter(states=FAILED), {"a_err", "a_timeout", "b_err", "b_invalid"}),
        (JobFilter(states=FAILED, task="a"), {"a_err", "a_timeout"}),
        (JobFilter(states=FAILED, queue="q2"), {"a_timeout", "b_invalid"}),
        (JobFilter(states=FAILED, tenant="org-2"), {"a_timeout", "b_err"}),
        (JobFilter(states=FAILED, failure_reason=FailureReason.ERROR), {"a_err", "b_err"}),
        (JobFilter(states=FAILED, task="b", queue="q1", tenant="org-2"), {"b_err"}),
        (JobFilter(states=FAILED, failure_reason=FailureReason.STALLED), set()),
    ],
)
async def test_list_and_count_filtered(
    backend: Backend, where: JobFilter, expected: set[str]
) -> None:
    named = await dead_letters(backend)
    listed = await backend.list_jobs(where)
    assert {j.id for j in listed} == {named[n] for n in expected}
    assert all(j.state is JobState.FAILED for j in listed)
    assert await backend.count_jobs(where) == len(expected)


async def test_retry_failed_creates_a_fresh_copy(backend: Backend) -> None:
    failed = await make_failed(
        backend,
        "report",
        "reports",
        FailureReason.ERROR,
        payload={"n": 1},
        metadata={"m": "x"},
        priority=4,
        max_attempts=7,
        timeout=9.0,
        tenant="org-1",
        idempotency_key="report-1",
    )
    new_job_id = new_id()
    before = await backend.now()
    copy = await backend.retry_failed(failed.id, new_job_id)

    assert copy.id == new_job_id
    assert copy.state is JobState.WAITING
    assert (copy.task, copy.queue) == ("report", "reports")
    assert copy.payload == {"n": 1}
    assert copy.metadata == {"m": "x"}
    assert copy.priority == 4
    assert copy.max_attempts == 7
    assert copy.timeout == 9.0
    assert copy.tenant == "org-1"
    assert copy.attempts == 0
    assert copy.stalls == 0
    assert copy.errors == []
    assert copy.failure_reason is None
    assert copy.result is None
    assert copy.retry_of == failed.id
    assert copy.idempotency_key is None
    assert copy.created_at >= before
    assert copy.run_at <= await backend.now()
    stored_copy = await fetch(backend, new_job_id)
    assert stored_copy.retry_of == failed.id
    assert stored_copy.state is JobState.WAITING

    original = await fetch(backend, failed.id)
    assert original.retried_as == new_job_id
    assert original.state is JobState.FAILED

    claimed = await claim_one(backend, "reports")
    assert claimed.id == new_job_id
    assert claimed.attempts == 1


async def test_retry_failed_refuses_other_states(backend: Backend) -> None:
    waiting = await enqueue_one(backend, queue="w")
    completed = await make_finished(backend, JobState.COMPLETED, queue="c")
    cancelled = await make_finished(backend, JobState.CANCELLED, queue="x")
    await enqueue_one(backend, queue="act")
    active = await claim_one(backend, "act")
    for job in (waiting, completed, cancelled, active):
        with pytest.raises(InvalidStateError):
            await backend.retry_failed(job.id, new_id())
    with pytest.raises(JobNotFound):
        await backend.retry_failed("no-such-job", new_id())
    assert await backend.count_jobs(JobFilter()) == 4


async def test_delete_jobs(backend: Backend) -> None:
    named = await dead_letters(backend)
    deleted = await backend.delete_jobs([named["a_err"], named["b_err"], "no-such-job"])
    assert deleted == 2
    assert await backend.get_jobs([named["a_err"], named["b_err"]]) == []
    assert await backend.count_jobs(JobFilter(states=FAILED)) == 2


async def test_delete_never_touches_an_active_job(backend: Backend) -> None:
    await enqueue_one(backend)
    active = await claim_one(backend)
    waiting = await enqueue_one(backend)
    assert await backend.delete_jobs([active.id, waiting.id]) == 1
    assert (await fetch(backend, active.id)).state is JobState.ACTIVE
    assert await backend.get_job(waiting.id) is None


async def test_purge_with_a_filter(backend: Backend) -> None:
    named = await dead_letters(backend)
    purged = await backend.purge_jobs(JobFilter(states=FAILED, task="b"))
    assert purged == 2
    left = await backend.list_jobs(JobFilter(states=FAILED))
    assert {j.id for j in left} == {named["a_err"], named["a_timeout"]}
    assert await backend.count_jobs(JobFilter(task="a")) == 4  # completed + waiting untouched


async def test_purge_finished_before(backend: Backend) -> None:
    old = await make_failed(backend, queue="q")
    await asyncio.sleep(0.05)
    cutoff = await backend.now()
    await asyncio.sleep(0.05)
    new = await make_failed(backend, queue="q")
    assert await backend.purge_jobs(JobFilter(states=FAILED, finished_before=cutoff)) == 1
    assert await backend.get_job(old.id) is None
    assert await backend.get_job(new.id) is not None


async def test_purge_never_deletes_active_jobs(backend: Backend) -> None:
    await enqueue_one(backend, "t")
    active = (await claim(backend)).jobs[0]
    await make_failed(backend, "t")
    assert await backend.purge_jobs(JobFilter(task="t")) == 1
    assert (await fetch(backend, active.id)).state is JobState.ACTIVE


async def test_count_of_the_whole_dead_letter_queue(backend: Backend) -> None:
    assert await backend.count_jobs(JobFilter(states=FAILED)) == 0
    await dead_letters(backend)
    assert await backend.count_jobs(JobFilter(states=FAILED)) == 4


async def test_retrying_a_dead_letter_twice_returns_the_first_retry(backend: Backend) -> None:
    failed = await make_failed(backend, "charge", "payments", FailureReason.ERROR)
    first = await backend.retry_failed(failed.id, new_id())
    again = await backend.retry_failed(failed.id, new_id())
    assert not first.duplicate
    assert again.id == first.id
    assert again.duplicate
    assert await backend.count_jobs(JobFilter(task="charge")) == 2  # the original + one copy
    assert (await fetch(backend, failed.id)).retried_as == first.id


async def test_concurrent_retries_of_one_dead_letter_make_one_copy(backend: Backend) -> None:
    failed = await make_failed(backend, "charge", "payments", FailureReason.ERROR)
    copies = await asyncio.gather(*(backend.retry_failed(failed.id, new_id()) for _ in range(8)))
    assert len({c.id for c in copies}) == 1
    assert sum(not c.duplicate for c in copies) == 1
    waiting = await backend.list_jobs(JobFilter(states=[JobState.WAITING], task="charge"))
    assert [j.id for j in waiting] == [copies[0].id]


async def test_retry_after_the_copy_was_deleted_is_refused(backend: Backend) -> None:
    failed = await make_failed(backend, "charge", "payments", FailureReason.ERROR)
    copy = await backend.retry_failed(failed.id, new_id())
    await backend.delete_jobs([copy.id])
    with pytest.raises(InvalidStateError, match="already retried"):
        await backend.retry_failed(failed.id, new_id())
    assert await backend.count_jobs(JobFilter(task="charge")) == 1

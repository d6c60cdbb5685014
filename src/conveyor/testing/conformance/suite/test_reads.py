"""Reads: get_jobs, list_jobs (filters, order, pages), count_jobs, and a corrupt row."""

from __future__ import annotations

import asyncio

import pytest

from conveyor.backends.base import Backend, JobFilter, Outcome
from conveyor.job import FailureReason, JobState
from conveyor.testing.conformance.kit import BackendKit

from .helpers import (
    claim,
    claim_exact,
    enqueue,
    enqueue_one,
    enqueue_sequentially,
    error,
    fetch,
    ids,
    make_failed,
    make_finished,
    new_job,
    settle_ok,
)


async def test_get_jobs_returns_those_that_exist(backend: Backend) -> None:
    a, b = await enqueue(backend, new_job(), new_job())
    got = await backend.get_jobs([b.id, "missing", a.id])
    assert sorted(ids(got)) == sorted([a.id, b.id])
    assert await backend.get_jobs([]) == []
    assert await backend.get_job("missing") is None
    assert (await fetch(backend, a.id)).id == a.id


async def test_list_newest_first(backend: Backend) -> None:
    made = await enqueue_sequentially(backend, 5)
    listed = await backend.list_jobs(JobFilter())
    assert ids(listed) == ids(made)[::-1]


async def test_list_pagination(backend: Backend) -> None:
    made = ids(await enqueue_sequentially(backend, 7))[::-1]
    pages = [await backend.list_jobs(JobFilter(), limit=3, offset=o) for o in (0, 3, 6, 9)]
    assert [ids(p) for p in pages] == [made[0:3], made[3:6], made[6:7], []]


async def test_list_ties_on_created_at_break_by_id(backend: Backend) -> None:
    made = await backend.enqueue_jobs([new_job() for _ in range(5)])
    listed = await backend.list_jobs(JobFilter())
    assert ids(listed) == sorted(ids(made), reverse=True)


async def test_filters(backend: Backend) -> None:
    waiting = await enqueue_one(backend, "a", "q1", tenant="org-1")
    (delayed,) = await enqueue(backend, new_job("b", "q1", delay=60))
    to_run = await enqueue_one(backend, "a", "q2", tenant="org-2")
    active = await claim_exact(backend, to_run)
    done = await make_finished(backend, JobState.COMPLETED, "b", "q2")
    failed = await make_failed(backend, "a", "q3", FailureReason.TIMEOUT, tenant="org-1")

    async def listed(**where: object) -> set[str]:
        jobs = await backend.list_jobs(JobFilter(**where))  # type: ignore[arg-type]
        assert await backend.count_jobs(JobFilter(**where)) == len(jobs)  # type: ignore[arg-type]
        return set(ids(jobs))

    everything = {waiting.id, delayed.id, active.id, done.id, failed.id}
    assert await listed() == everything
    assert await listed(states=[JobState.WAITING]) == {waiting.id}
    assert await listed(states=[JobState.WAITING, JobState.DELAYED]) == {waiting.id, delayed.id}
    assert await listed(states=[JobState.ACTIVE]) == {active.id}
    assert await listed(states=[]) == set()
    assert await listed(queue="q1") == {waiting.id, delayed.id}
    assert await listed(task="a") == {waiting.id, active.id, failed.id}
    assert await listed(tenant="org-1") == {waiting.id, failed.id}
    assert await listed(failure_reason=FailureReason.TIMEOUT) == {failed.id}
    assert await listed(task="b", queue="q2") == {done.id}
    assert await listed(queue="nowhere") == set()


async def test_finished_before(backend: Backend) -> None:
    first = await make_finished(backend, JobState.COMPLETED)
    await asyncio.sleep(0.05)
    cutoff = await backend.now()
    await asyncio.sleep(0.05)
    second = await make_finished(backend, JobState.COMPLETED)
    await enqueue_one(backend)  # never finished: never matches
    where = JobFilter(finished_before=cutoff)
    assert ids(await backend.list_jobs(where)) == [first.id]
    assert await backend.count_jobs(where) == 1
    assert second.finished_at is not None
    assert second.finished_at > cutoff


async def test_count_jobs(backend: Backend) -> None:
    assert await backend.count_jobs(JobFilter()) == 0
    await backend.enqueue_jobs([new_job(queue="x") for _ in range(4)] + [new_job()])
    assert await backend.count_jobs(JobFilter()) == 5
    assert await backend.count_jobs(JobFilter(queue="x")) == 4
    assert await backend.count_jobs(JobFilter(states=[JobState.FAILED])) == 0


async def test_corrupt_payload_yields_decode_error(backend: Backend, kit: BackendKit) -> None:
    bad, good = await enqueue(
        backend, new_job(payload={"ok": 1}, metadata={"m": 1}), new_job(payload={"ok": 2})
    )
    await kit.corrupt_payload(backend, bad.id)

    stored = await fetch(backend, bad.id)
    assert stored.decode_error is not None
    assert "payload" in stored.decode_error
    assert stored.task == bad.task
    assert stored.state is JobState.WAITING
    assert stored.metadata == {"m": 1}
    assert (await fetch(backend, good.id)).decode_error is None

    listed = {j.id: j for j in await backend.list_jobs(JobFilter())}
    assert listed[bad.id].decode_error is not None
    assert listed[good.id].decode_error is None

    # The claim hands it out (the worker fails it as invalid) and the rest of the batch runs.
    claimed = {j.id: j for j in (await claim(backend, limit=10)).jobs}
    assert set(claimed) == {bad.id, good.id}
    assert claimed[bad.id].decode_error is not None
    assert claimed[good.id].payload == {"ok": 2}
    await settle_ok(
        backend,
        claimed[bad.id],
        Outcome.FAIL,
        error=error(stored.decode_error or ""),
        failure_reason=FailureReason.INVALID,
    )
    assert (await fetch(backend, bad.id)).failure_reason is FailureReason.INVALID


@pytest.mark.parametrize("limit", [1, 2, 100])
async def test_list_limit(backend: Backend, limit: int) -> None:
    await enqueue_sequentially(backend, 3)
    assert len(await backend.list_jobs(JobFilter(), limit=limit)) == min(limit, 3)


async def test_returned_errors_are_copies(backend: Backend) -> None:
    await enqueue_one(backend)
    (running,) = (await claim(backend)).jobs
    await settle_ok(backend, running, Outcome.RETRY, error=error("original"), retry_delay=60)
    job = await fetch(backend, running.id)
    assert job.error is not None
    job.error.message = "tampered"
    job.errors[0].type = "Tampered"
    again = await fetch(backend, running.id)
    assert [(e.type, e.message) for e in again.errors] == [("RuntimeError", "original")]

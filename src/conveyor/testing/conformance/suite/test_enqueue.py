"""enqueue_jobs: what is stored, in which state, and at what times."""

from __future__ import annotations

import pytest

from conveyor.backends.base import Backend, JobFilter
from conveyor.errors import BackendError
from conveyor.job import ErrorInfo, JobState

from .helpers import CLOCK_SLACK, enqueue, fetch, new_job


async def test_enqueue_stores_every_field(backend: Backend) -> None:
    new = new_job(
        "email.send",
        "emails",
        {"to": "a@b.c", "n": [1, 2]},
        metadata={"correlation_id": "req-9"},
        priority=7,
        max_attempts=5,
        timeout=12.5,
        tenant="org-1",
        retry_of="some-old-job",
    )
    before = await backend.now()
    (job,) = await enqueue(backend, new)
    after = await backend.now()

    for seen in (job, await fetch(backend, new.id)):
        assert seen.id == new.id
        assert seen.task == "email.send"
        assert seen.queue == "emails"
        assert seen.payload == {"to": "a@b.c", "n": [1, 2]}
        assert seen.metadata == {"correlation_id": "req-9"}
        assert seen.state is JobState.WAITING
        assert seen.priority == 7
        assert seen.attempts == 0
        assert seen.max_attempts == 5
        assert seen.timeout == 12.5
        assert seen.tenant == "org-1"
        assert seen.retry_of == "some-old-job"
        assert before <= seen.created_at <= after
        assert seen.run_at == seen.created_at
        assert seen.expires_at is None
        assert seen.lease_until is None
        assert seen.lease_token is None
        assert seen.worker_id is None
        assert seen.started_at is None
        assert seen.finished_at is None
        assert seen.errors == []
        assert seen.error is None
        assert seen.failure_reason is None
        assert seen.duplicate is False
        assert seen.decode_error is None


async def test_results_come_back_in_input_order(backend: Backend) -> None:
    batch = [new_job(f"task-{i}", f"q{i % 3}") for i in range(20)]
    jobs = await backend.enqueue_jobs(batch)
    assert [j.id for j in jobs] == [n.id for n in batch]
    assert [j.task for j in jobs] == [n.task for n in batch]
    assert [j.queue for j in jobs] == [n.queue for n in batch]
    assert await backend.count_jobs(JobFilter()) == 20


@pytest.mark.parametrize("where", ["stored", "in the batch"])
async def test_an_id_taken_refuses_the_whole_batch(backend: Backend, where: str) -> None:
    (first,) = await enqueue(backend, new_job("first"))
    taken = first.id if where == "stored" else new_job().id
    batch = [new_job("a"), new_job("b", id=taken), new_job("c")]
    if where == "in the batch":
        batch.insert(1, new_job("d", id=taken))
    with pytest.raises(BackendError):
        await backend.enqueue_jobs(batch)
    assert await backend.count_jobs(JobFilter()) == 1
    assert (await fetch(backend, first.id)).task == "first"


async def test_empty_batch_is_a_no_op(backend: Backend) -> None:
    assert await backend.enqueue_jobs([]) == []
    assert await backend.count_jobs(JobFilter()) == 0


async def test_delay_makes_a_delayed_job_on_the_backend_clock(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job(delay=60))
    assert job.state is JobState.DELAYED
    assert abs(job.run_at - (job.created_at + 60)) < 1e-3
    assert (await fetch(backend, job.id)).state is JobState.DELAYED


async def test_absolute_run_at_wins_over_delay(backend: Backend) -> None:
    now = await backend.now()
    future, past = await enqueue(
        backend, new_job(run_at=now + 120, delay=1), new_job(run_at=now - 120, delay=500)
    )
    assert future.state is JobState.DELAYED
    assert future.run_at == now + 120
    assert past.state is JobState.WAITING
    assert past.run_at == now - 120


async def test_zero_delay_is_waiting(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job(delay=0))
    assert job.state is JobState.WAITING
    assert job.run_at <= await backend.now() + CLOCK_SLACK


async def test_null_payload_and_no_metadata_round_trip(backend: Backend) -> None:
    new = new_job(payload=[None, "x", 1.5, True])
    await enqueue(backend, new)
    job = await fetch(backend, new.id)
    assert job.payload == [None, "x", 1.5, True]
    assert job.metadata == {}
    assert job.tenant is None


async def test_returned_jobs_are_copies(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job(payload={"k": [1]}, metadata={"m": 1}))
    job.payload["k"].append(2)
    job.metadata["m"] = 99
    job.state = JobState.COMPLETED
    job.errors.append(ErrorInfo("Injected", "by the caller"))

    stored = await fetch(backend, job.id)
    assert stored.payload == {"k": [1]}
    assert stored.metadata == {"m": 1}
    assert stored.state is JobState.WAITING
    assert stored.errors == []

    stored.payload["k"].clear()
    assert (await fetch(backend, job.id)).payload == {"k": [1]}

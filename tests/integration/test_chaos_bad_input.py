"""Chaos: bad input gets a clear, typed error and loses nothing (§4 "Bad input",
G9): refused at enqueue, or failed with a reason by a real worker process that
goes on with the rest of its batch."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest
from chaos_helpers import Cluster

from conveyor.errors import PayloadTooLarge, SerializationError
from conveyor.job import FailureReason, JobState

pytestmark = pytest.mark.slow


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path) as chaos:
        yield chaos


def stored_rows(db_path: Path) -> int:
    with closing(sqlite3.connect(db_path, timeout=10)) as db:
        (count,) = db.execute("SELECT count(*) FROM jobs").fetchone()
    return int(count)


@pytest.mark.timeout(30)
async def test_unencodable_and_oversized_payloads_store_nothing(cluster: Cluster) -> None:
    app = await cluster.app()
    with pytest.raises(SerializationError):
        await app.enqueue("chaos.sleep", {"seconds": object()})
    with pytest.raises(SerializationError):
        await app.enqueue("chaos.sleep", {"tags": {"a", "b"}})
    with pytest.raises(SerializationError):  # one bad item: the whole batch is refused
        await app.enqueue_many(
            [("chaos.sleep", {"seconds": 0}), ("chaos.sleep", {"when": object()})]
        )
    limit = app.settings.max_payload_bytes
    with pytest.raises(PayloadTooLarge) as too_large:
        await app.enqueue("chaos.sleep", {"blob": "x" * limit})
    assert too_large.value.limit == limit
    assert too_large.value.size > limit
    with pytest.raises(PayloadTooLarge):
        await app.enqueue_many(
            [("chaos.sleep", {"seconds": 0}), ("chaos.sleep", {"blob": "x" * limit})]
        )
    assert await app.count_jobs() == 0
    assert stored_rows(cluster.db_path) == 0, "a refused enqueue stored a row"

    # Just under the limit is accepted (the bound is on the encoded payload).
    fits = "x" * (limit - len(b'{"blob":""}'))
    job = await app.enqueue("chaos.sleep", {"blob": fits})
    assert (await app.get_job(job.id)) is not None
    assert stored_rows(cluster.db_path) == 1


@pytest.mark.timeout(60)
async def test_bad_jobs_fail_with_a_reason_and_the_worker_goes_on(cluster: Cluster) -> None:
    app = await cluster.app()
    good = [("chaos.sleep", {"seconds": 0.05, "i": i}) for i in range(10)]
    batch = await app.enqueue_many(
        [
            *good,
            ("chaos.no_such_task", {"x": 1}),
            ("chaos.validated", {"n": "not an int"}),
            ("chaos.validated", {"n": 7}),
            ("chaos.fenced", {"first": 0, "no_such_parameter": 1}),
            ("chaos.sleep", {"seconds": 0.05, "corrupt": True}),
            ("chaos.sleep", {"seconds": 0.05}, {"metadata": {"corrupt": True}}),
        ]
    )
    *good_jobs, unknown, invalid, valid, misfit, corrupt, corrupt_meta = batch
    with closing(sqlite3.connect(cluster.db_path, timeout=10)) as db, db:
        changed = db.execute(
            "UPDATE jobs SET payload = x'ff00' WHERE id = ?", (corrupt.id,)
        ).rowcount
        changed += db.execute(
            "UPDATE jobs SET metadata = x'ff00' WHERE id = ?", (corrupt_meta.id,)
        ).rowcount
    assert changed == 2

    # One worker claims the whole batch at once: the bad rows must not sink it.
    # No task grace: no worker will ever know chaos.no_such_task.
    worker = cluster.start_worker(50, {"CONVEYOR_UNKNOWN_TASK_GRACE": "0"})

    async def all_terminal() -> bool:
        jobs = await app.backend.get_jobs([job.id for job in batch])
        return len(jobs) == len(batch) and all(job.is_terminal for job in jobs)

    await cluster.wait_until(all_terminal, 30, "not every job of the batch ended")
    ended = {job.id: job for job in await app.backend.get_jobs([job.id for job in batch])}

    for job in [*good_jobs, valid]:
        assert ended[job.id].state is JobState.COMPLETED, f"{job.task}: {ended[job.id].error}"
    assert ended[valid.id].result["n"] == 7

    failed_unknown = ended[unknown.id]
    assert failed_unknown.state is JobState.FAILED
    assert failed_unknown.failure_reason is FailureReason.UNKNOWN_TASK
    assert failed_unknown.attempts == 1
    assert failed_unknown.error is not None
    assert "chaos.no_such_task" in failed_unknown.error.message

    failed_invalid = ended[invalid.id]
    assert failed_invalid.state is JobState.FAILED
    assert failed_invalid.failure_reason is FailureReason.INVALID
    assert failed_invalid.attempts == 1, "an invalid payload was retried"
    assert failed_invalid.error is not None
    assert "integer `n`" in failed_invalid.error.message

    failed_misfit = ended[misfit.id]
    assert failed_misfit.state is JobState.FAILED
    assert failed_misfit.failure_reason is FailureReason.INVALID, failed_misfit.error
    assert failed_misfit.attempts == 1, "a payload that fits no parameter was retried"

    for job, column in ((corrupt, "payload"), (corrupt_meta, "metadata")):
        failed_corrupt = ended[job.id]
        assert failed_corrupt.state is JobState.FAILED, f"corrupt {column}: {failed_corrupt.state}"
        assert failed_corrupt.failure_reason is FailureReason.INVALID
        assert failed_corrupt.attempts == 1
        assert failed_corrupt.error is not None
        assert column in failed_corrupt.error.message, failed_corrupt.error

    ran = set(cluster.run_counts())
    assert ran == {job.id for job in [*good_jobs, valid]}, "a bad job reached its handler"
    assert await app.dlq.count() == 5

    # ... and the worker goes on.
    after = await app.enqueue("chaos.sleep", {"seconds": 0})
    done = await app.wait_for_job(after.id, timeout=20)
    assert done.state is JobState.COMPLETED
    assert worker.alive, worker.tail()
    assert "internal error" not in worker.err(), worker.tail(40)

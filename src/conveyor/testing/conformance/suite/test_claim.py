"""claim_jobs: order, limits, paused queues, delays, and atomicity."""

from __future__ import annotations

import asyncio

from conveyor.backends.base import Backend, ClaimRequest, JobFilter
from conveyor.ids import new_id
from conveyor.job import JobState
from conveyor.testing.conformance.kit import BackendKit

from .helpers import (
    CLOCK_SLACK,
    again_when_late,
    claim,
    claim_before,
    enqueue,
    enqueue_sequentially,
    fetch,
    ids,
    new_job,
)


async def test_claim_marks_jobs_active_with_one_fresh_lease(backend: Backend) -> None:
    queued = await enqueue(backend, new_job(), new_job(), new_job())
    before = await backend.now()
    result = await claim(backend, limit=10, lease=20, worker_id="w-7")
    after = await backend.now()

    assert sorted(ids(result.jobs)) == sorted(ids(queued))
    tokens = {job.lease_token for job in result.jobs}
    assert len(tokens) == 1
    assert None not in tokens
    assert "" not in tokens
    for job in result.jobs:
        assert job.state is JobState.ACTIVE
        assert job.attempts == 1
        assert job.worker_id == "w-7"
        assert job.started_at is not None
        assert before <= job.started_at <= after
        assert job.lease_until is not None
        assert abs(job.lease_until - (job.started_at + 20)) < 1e-3
        stored = await fetch(backend, job.id)
        assert stored.state is JobState.ACTIVE
        assert stored.lease_token == job.lease_token
        assert stored.attempts == 1
    assert result.expired == []


async def test_each_claim_gets_its_own_token(backend: Backend) -> None:
    await enqueue(backend, new_job(), new_job())
    first = await claim(backend, limit=1)
    second = await claim(backend, limit=1)
    assert first.jobs[0].lease_token != second.jobs[0].lease_token


async def test_nothing_to_claim(backend: Backend) -> None:
    result = await claim(backend)
    assert result.jobs == []
    assert result.expired == []


async def test_higher_priority_first(backend: Backend) -> None:
    low, high, normal, critical = await enqueue(
        backend,
        new_job(priority=-10),
        new_job(priority=10),
        new_job(priority=0),
        new_job(priority=20),
    )
    result = await claim(backend, limit=10)
    assert ids(result.jobs) == [critical.id, high.id, normal.id, low.id]


async def test_fifo_within_a_priority_by_run_at(backend: Backend) -> None:
    now = await backend.now()
    # Enqueued out of order; run_at decides.
    third, first, second = await enqueue(
        backend,
        new_job(run_at=now - 1),
        new_job(run_at=now - 3),
        new_job(run_at=now - 2),
    )
    result = await claim(backend, limit=10)
    assert ids(result.jobs) == [first.id, second.id, third.id]


async def test_ties_on_run_at_break_by_id(backend: Backend) -> None:
    now = await backend.now()
    stem = new_id()[:12]
    names = [f"{stem}{n:014x}" for n in (3, 1, 2)]
    await enqueue(backend, *(new_job(id=name, run_at=now - 5) for name in names))
    result = await claim(backend, limit=10)
    assert ids(result.jobs) == sorted(names)


async def test_ties_break_by_id_across_tasks_and_queues(backend: Backend) -> None:
    now = await backend.now()
    stem = new_id()[:12]
    placed = [
        (f"{stem}{n:014x}", task, queue)
        for n, task, queue in [
            (4, "a", "q1"),
            (2, "b", "q2"),
            (1, "c", "q1"),
            (3, "a", "q2"),
            (0, "b", "q1"),
        ]
    ]
    await enqueue(
        backend, *(new_job(task, queue, id=name, run_at=now - 5) for name, task, queue in placed)
    )
    result = await claim(backend, ["q1", "q2"], limit=10)
    assert ids(result.jobs) == sorted(name for name, _, _ in placed)


async def test_fifo_for_jobs_enqueued_one_after_another(backend: Backend) -> None:
    jobs = await enqueue_sequentially(backend, 6)
    taken: list[str] = []
    for _ in range(3):
        taken += ids((await claim(backend, limit=2)).jobs)
    assert taken == ids(jobs)


async def test_priority_beats_age(backend: Backend) -> None:
    now = await backend.now()
    old, new_high = await enqueue(
        backend, new_job(run_at=now - 100, priority=0), new_job(priority=1)
    )
    result = await claim(backend, limit=1)
    assert ids(result.jobs) == [new_high.id]
    assert (await fetch(backend, old.id)).state is JobState.WAITING


async def test_batch_limit(backend: Backend) -> None:
    await enqueue(backend, *(new_job() for _ in range(10)))
    first = await claim(backend, limit=3)
    second = await claim(backend, limit=3)
    rest = await claim(backend, limit=100)
    assert len(first.jobs) == 3
    assert len(second.jobs) == 3
    assert len(rest.jobs) == 4
    assert len(set(ids(first.jobs + second.jobs + rest.jobs))) == 10
    assert (await claim(backend, limit=100)).jobs == []


async def test_limit_zero_claims_nothing(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job())
    assert (await claim(backend, limit=0)).jobs == []
    assert (await fetch(backend, job.id)).state is JobState.WAITING


async def test_only_requested_queues(backend: Backend) -> None:
    a, b, c = await enqueue(backend, new_job(queue="a"), new_job(queue="b"), new_job(queue="c"))
    result = await claim(backend, ["a", "c"], limit=10)
    assert sorted(ids(result.jobs)) == sorted([a.id, c.id])
    assert (await fetch(backend, b.id)).state is JobState.WAITING


async def test_several_queues_are_merged_by_priority_then_age(backend: Backend) -> None:
    now = await backend.now()
    a_old, b_high, a_high, b_old = await enqueue(
        backend,
        new_job(queue="a", run_at=now - 10),
        new_job(queue="b", priority=5, run_at=now - 1),
        new_job(queue="a", priority=5, run_at=now - 2),
        new_job(queue="b", run_at=now - 20),
    )
    result = await claim(backend, ["a", "b"], limit=10)
    assert ids(result.jobs) == [a_high.id, b_high.id, b_old.id, a_old.id]


async def test_paused_queue_is_not_claimed_until_resumed(backend: Backend) -> None:
    (paused_job, other) = await enqueue(backend, new_job(queue="p"), new_job(queue="o"))
    await backend.set_queue_paused("p", True)

    result = await claim(backend, ["p", "o"], limit=10)
    assert ids(result.jobs) == [other.id]
    assert (await fetch(backend, paused_job.id)).state is JobState.WAITING

    await backend.set_queue_paused("p", False)
    result = await claim(backend, ["p", "o"], limit=10)
    assert ids(result.jobs) == [paused_job.id]


@again_when_late
async def test_delayed_job_is_not_claimed_until_due(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job(delay=0.2))
    assert (await claim_before(backend, job.run_at)).jobs == []
    assert (await fetch(backend, job.id)).state is JobState.DELAYED

    await asyncio.sleep(0.27)
    result = await claim(backend)
    assert ids(result.jobs) == [job.id]
    assert result.jobs[0].attempts == 1
    started = result.jobs[0].started_at
    assert started is not None
    assert started >= job.run_at


async def test_promoted_job_keeps_its_place_by_run_at(backend: Backend) -> None:
    (delayed,) = await enqueue(backend, new_job(delay=0.2))
    await asyncio.sleep(0.25)
    (later,) = await enqueue(backend, new_job())
    assert later.run_at > delayed.run_at
    await asyncio.sleep(0.05)
    result = await claim(backend, limit=10)
    assert ids(result.jobs) == [delayed.id, later.id]
    assert result.jobs[0].run_at == delayed.run_at


async def test_delayed_job_in_another_queue_is_promoted_by_any_claim(backend: Backend) -> None:
    (job,) = await enqueue(backend, new_job(queue="elsewhere", delay=0.2))
    await asyncio.sleep(0.3)
    await claim(backend, ["default"])
    assert (await fetch(backend, job.id)).state is JobState.WAITING


async def test_claimed_jobs_are_not_claimed_again(backend: Backend) -> None:
    await enqueue(backend, *(new_job() for _ in range(5)))
    first = await claim(backend, limit=10)
    assert len(first.jobs) == 5
    assert (await claim(backend, limit=10)).jobs == []
    assert await backend.count_jobs(JobFilter(states=[JobState.ACTIVE])) == 5


async def test_task_limits_cap_a_task_in_one_claim(backend: Backend) -> None:
    await enqueue(backend, *(new_job("capped") for _ in range(5)))
    await enqueue(backend, *(new_job("free") for _ in range(5)))
    await enqueue(backend, *(new_job("blocked") for _ in range(2)))
    result = await claim(backend, limit=100, task_limits={"capped": 2, "blocked": 0})
    tasks = [j.task for j in result.jobs]
    assert tasks.count("capped") == 2
    assert tasks.count("free") == 5
    assert tasks.count("blocked") == 0


async def test_concurrent_claims_never_share_a_job(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(priority=i % 3) for i in range(300)])
    results = await asyncio.gather(
        *(claim(backend, limit=25, worker_id=f"w{i}") for i in range(20))
    )
    claimed = [job.id for result in results for job in result.jobs]
    assert len(claimed) == len(set(claimed)) == 300
    tokens = [result.jobs[0].lease_token for result in results if result.jobs]
    assert len(tokens) == len(set(tokens))


async def test_two_instances_on_one_store_never_share_a_job(
    backend_pair: tuple[Backend, Backend],
) -> None:
    first, second = backend_pair
    await first.enqueue_jobs([new_job() for _ in range(200)])
    results = await asyncio.gather(
        *(claim(b, limit=15, worker_id=f"w{i}") for i in range(10) for b in (first, second))
    )
    claimed = [job.id for result in results for job in result.jobs]
    assert len(claimed) == len(set(claimed)) == 200
    by_first = sum(len(r.jobs) for r in results[0::2])
    by_second = sum(len(r.jobs) for r in results[1::2])
    assert by_first + by_second == 200
    assert await second.count_jobs(JobFilter(states=[JobState.WAITING])) == 0


async def test_claim_sees_the_jobs_of_the_other_instance(
    backend_pair: tuple[Backend, Backend],
) -> None:
    producer, worker = backend_pair
    (job,) = await enqueue(producer, new_job(payload={"x": 1}))
    result = await claim(worker)
    assert ids(result.jobs) == [job.id]
    assert result.jobs[0].payload == {"x": 1}
    assert (await fetch(producer, job.id)).state is JobState.ACTIVE


async def test_claim_stamps_backend_time(backend: Backend) -> None:
    await enqueue(backend, new_job())
    now = await backend.now()
    (job,) = (await claim(backend, lease=5)).jobs
    assert job.started_at is not None
    assert abs(job.started_at - now) < CLOCK_SLACK


async def test_a_cancelled_claim_leaves_no_job_claimed_by_nobody(kit: BackendKit) -> None:
    """The caller of a claim is cancelled while it is in flight: whatever the
    claim took anyway goes back to waiting with its attempt returned, by the
    time ``close`` returns (not after a lease expiry)."""
    first = kit.shared_backend()
    await first.open()
    await enqueue(first, *(new_job() for _ in range(10)))
    task = asyncio.create_task(first.claim_jobs(ClaimRequest("w", ["default"], 5, lease=600)))
    await asyncio.sleep(0)  # the claim is under way
    task.cancel()
    try:
        kept = len((await task).jobs)  # it finished before the cancel: the caller has them
    except asyncio.CancelledError:
        kept = 0
    await first.close()  # waits for the claim in flight and its release

    second = kit.shared_backend()
    await second.open()
    try:
        waiting = await second.list_jobs(JobFilter(states=[JobState.WAITING]))
        assert len(waiting) == 10 - kept
        assert {job.attempts for job in waiting} == {0}
    finally:
        await second.close()

"""Direct handoff on Redis: an enqueue claims new work for an idle worker and
pushes it to the worker's inbox, so the worker starts it without a claim of its
own. The claim rules (priority, paused queues, delays, free slots) are the
claim's own; what is tested here is who gets what, and that nothing is lost
between the inbox, the worker's next claim and its shutdown."""

from __future__ import annotations

import asyncio
import time

import msgpack
import pytest
import redis.asyncio as aioredis
from redis_fixtures import backend, client, url

from conveyor import Conveyor, JobContext
from conveyor.backends.base import ClaimRequest, Handoff, NewJob
from conveyor.backends.redis import RedisBackend
from conveyor.ids import new_ids
from conveyor.job import JobState
from conveyor.ratelimit import RateLimit
from conveyor.worker.worker import Worker

__all__ = ["backend", "client", "url"]  # fixtures

WORKER = "w1"


def _jobs(count: int, **options: object) -> list[NewJob]:
    return [
        NewJob(id=job_id, task="t", queue="default", payload=b"{}", **options)  # type: ignore[arg-type]
        for job_id in new_ids(count)
    ]


def _idle(limit: int = 10, handoff_for: float = 5.0, worker: str = WORKER) -> ClaimRequest:
    return ClaimRequest(worker, ["default"], limit, 30.0, handoff_for=handoff_for)


async def _pop(backend: RedisBackend, timeout: float = 1.0) -> list[Handoff]:
    handed = await backend.next_handoff(WORKER, timeout)
    assert handed is not None
    return handed


async def _idle_worker(
    app: Conveyor, backend: RedisBackend, client: aioredis.Redis
) -> tuple[Worker, asyncio.Task[None]]:
    """A running worker of 'default', once it has registered as idle."""
    worker = app.worker(queues=["default"], concurrency=4, install_signals=False)
    running = asyncio.create_task(worker.run())
    for _ in range(50):
        if await client.zcard(backend.keys.idle("default")):
            return worker, running
        await asyncio.sleep(0.05)
    worker.stop()
    await asyncio.wait_for(running, 10)
    raise AssertionError("the worker did not register as idle within 2.5 s")


async def test_an_idle_worker_is_handed_new_jobs_claimed_for_it(
    backend: RedisBackend, client: aioredis.Redis
) -> None:
    assert (await backend.claim_jobs(_idle(limit=10))).jobs == []
    jobs = _jobs(3)
    await backend.enqueue_jobs(jobs)
    enqueued = time.monotonic()
    await asyncio.sleep(0.2)  # waiting in the inbox does not make the lease look younger
    handed = await _pop(backend)
    assert len(handed) == 1
    got = handed[0].result.jobs
    assert [j.id for j in got] == [j.id for j in jobs]
    assert all(j.state is JobState.ACTIVE and j.worker_id == WORKER for j in got)
    assert all(j.attempts == 1 and j.lease_token for j in got)
    assert enqueued - 0.2 < handed[0].leased_at <= enqueued
    stored = await backend.get_jobs([j.id for j in jobs])
    assert {j.state for j in stored} == {JobState.ACTIVE}
    # The registration keeps the slots left over.
    assert await client.hget(backend.keys.idle_worker(WORKER), "free") == b"7"


async def test_no_more_than_the_free_slots_are_handed(
    backend: RedisBackend, client: aioredis.Redis
) -> None:
    await backend.claim_jobs(_idle(limit=2))
    jobs = _jobs(5)
    await backend.enqueue_jobs(jobs)
    handed = await _pop(backend)
    assert [j.id for h in handed for j in h.result.jobs] == [j.id for j in jobs[:2]]
    states = [j.state for j in await backend.get_jobs([j.id for j in jobs[2:]])]
    assert states == [JobState.WAITING] * 3
    assert await client.zcard(backend.keys.idle("default")) == 0  # full: unregistered
    assert await client.exists(backend.keys.idle_worker(WORKER)) == 0


async def test_the_highest_priority_is_handed_first(backend: RedisBackend) -> None:
    await backend.claim_jobs(_idle(limit=1))
    low, high = _jobs(1)[0], _jobs(1, priority=5)[0]
    await backend.enqueue_jobs([low, high])
    handed = await _pop(backend)
    assert [j.id for h in handed for j in h.result.jobs] == [high.id]


async def test_paused_queues_and_delayed_jobs_are_not_handed(backend: RedisBackend) -> None:
    await backend.claim_jobs(_idle())
    later = _jobs(1, delay=60.0)
    await backend.enqueue_jobs(later)
    await backend.set_queue_paused("default", True)
    paused = _jobs(2)
    await backend.enqueue_jobs(paused)
    assert await _pop(backend, timeout=0.2) == []
    stored = {j.id: j.state for j in await backend.get_jobs([j.id for j in later + paused])}
    assert stored == {
        later[0].id: JobState.DELAYED,
        paused[0].id: JobState.WAITING,
        paused[1].id: JobState.WAITING,
    }


async def test_a_claim_without_handoff_for_registers_nothing(backend: RedisBackend) -> None:
    await backend.claim_jobs(_idle(handoff_for=0))
    jobs = _jobs(1)
    await backend.enqueue_jobs(jobs)
    assert await _pop(backend, timeout=0.2) == []
    assert (await backend.get_jobs([jobs[0].id]))[0].state is JobState.WAITING


async def test_a_request_with_caps_or_rate_limits_registers_nothing(
    backend: RedisBackend, client: aioredis.Redis
) -> None:
    """Stored, they would go stale as the worker's jobs run."""
    capped = ClaimRequest(WORKER, ["default"], 10, 30.0, task_limits={"t": 2}, handoff_for=5.0)
    await backend.claim_jobs(capped)
    limited = ClaimRequest(
        "w2", ["default"], 10, 30.0, rate_limits={"t": RateLimit(5, 1.0)}, handoff_for=5.0
    )
    await backend.claim_jobs(limited)
    assert await client.zcard(backend.keys.idle("default")) == 0


async def test_an_end_marker_left_by_an_earlier_process_is_ignored(
    backend: RedisBackend, client: aioredis.Redis
) -> None:
    """A worker that reuses an id must not take the last one's end as its own."""
    await client.rpush(backend.keys.inbox(WORKER), b"")
    await backend.claim_jobs(_idle())
    jobs = _jobs(1)
    await backend.enqueue_jobs(jobs)
    handed = await _pop(backend)
    assert [j.id for h in handed for j in h.result.jobs] == [jobs[0].id]
    assert await _pop(backend, timeout=0.1) == []


async def test_a_handoff_in_another_format_is_skipped_not_fatal(
    backend: RedisBackend, client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """An inbox item another build packed (rows where lease groups belong) is
    skipped by the worker's pop (with a warning) and by its next claim; what
    comes with it is still delivered."""
    # As the server's cmsgpack packs: strings, no bin type.
    other = msgpack.packb(["1763856000.5", [["t", "x", "id", "old"]], []], use_bin_type=False)
    inbox = backend.keys.inbox(WORKER)
    await backend.claim_jobs(_idle())
    await client.rpush(inbox, other)
    first = _jobs(1)
    await backend.enqueue_jobs(first)
    handed = await _pop(backend)
    assert [j.id for h in handed for j in h.result.jobs] == [first[0].id]
    assert "cannot read" in caplog.text

    await client.rpush(inbox, other)
    second = _jobs(1)
    await backend.enqueue_jobs(second)
    claimed = await backend.claim_jobs(_idle())  # takes the inbox itself
    assert [j.id for j in claimed.jobs] == [second[0].id]


async def test_the_registration_runs_out(backend: RedisBackend, client: aioredis.Redis) -> None:
    """A worker that died stops being offered work, and leaves no keys behind."""
    own = f"worker.{WORKER}"
    await backend.claim_jobs(ClaimRequest(WORKER, ["default", own], 10, 30.0, handoff_for=0.2))
    assert await client.zcard(backend.keys.idle(own)) == 1
    await asyncio.sleep(0.4)
    jobs = _jobs(1)
    await backend.enqueue_jobs(jobs)
    assert await _pop(backend, timeout=0.2) == []
    assert (await backend.get_jobs([jobs[0].id]))[0].state is JobState.WAITING
    # Nobody enqueues to the worker's own queue: its index expires by itself.
    assert await client.exists(backend.keys.idle(own), backend.keys.idle_worker(WORKER)) == 0


async def test_the_next_claim_takes_what_was_not_popped_and_counts_it(
    backend: RedisBackend,
) -> None:
    await backend.claim_jobs(_idle(limit=10))
    handed = _jobs(2)
    await backend.enqueue_jobs(handed)  # into the inbox, not popped
    waiting = _jobs(5)
    await backend.enqueue_jobs(waiting)  # handed too: 8 slots were free
    claim = await backend.claim_jobs(_idle(limit=4))
    ids = [j.id for j in claim.jobs]
    assert ids == [j.id for j in handed + waiting][:4]
    assert all(j.state is JobState.ACTIVE for j in claim.jobs)
    # What the inbox held beyond the limit is still this worker's: nothing is
    # lost, and nothing is handed twice.
    rest = await backend.claim_jobs(_idle(limit=10))
    assert [j.id for j in rest.jobs] == [j.id for j in handed + waiting][4:]
    assert await _pop(backend, timeout=0.2) == []


async def test_end_handoffs_returns_the_jobs_not_popped_and_ends_the_pop(
    backend: RedisBackend,
) -> None:
    await backend.claim_jobs(_idle())
    assert await _pop(backend, timeout=0.01) == []  # the pop has a connection of its own
    jobs = _jobs(2)
    await backend.enqueue_jobs(jobs)
    left = await backend.end_handoffs(WORKER, 30.0)
    assert [j.id for j in left.jobs] == [j.id for j in jobs]
    assert await backend.next_handoff(WORKER, 1.0) is None
    assert WORKER not in backend._handoffs.inboxes  # and gives it back when it ends
    after = _jobs(1)
    await backend.enqueue_jobs(after)  # no longer registered: it waits
    assert (await backend.get_jobs([after[0].id]))[0].state is JobState.WAITING


async def test_a_pop_in_progress_ends_at_once(backend: RedisBackend) -> None:
    await backend.claim_jobs(_idle())
    pop = asyncio.create_task(backend.next_handoff(WORKER, 5.0))
    await asyncio.sleep(0.1)
    await backend.end_handoffs(WORKER, 30.0)
    assert await asyncio.wait_for(pop, 2.0) in ([], None)
    if pop.result() == []:
        assert await backend.next_handoff(WORKER, 1.0) is None


async def test_a_worker_starts_jobs_handed_to_it_and_unregisters_on_stop(
    url: str, client: aioredis.Redis
) -> None:
    app = Conveyor(url, poll_interval="5s")
    started: list[str] = []

    @app.task("t")
    async def record(ctx: JobContext) -> None:
        started.append(ctx.job.id)

    backend = await app.connect()
    assert isinstance(backend, RedisBackend)
    delivered: list[str] = []
    pop = backend.next_handoff

    async def counting_pop(worker_id: str, timeout: float) -> list[Handoff] | None:
        handed = await pop(worker_id, timeout)
        delivered.extend(j.id for h in handed or [] for j in h.result.jobs)
        return handed

    backend.next_handoff = counting_pop  # type: ignore[method-assign]
    worker, running = await _idle_worker(app, backend, client)
    try:
        ids = []
        for _ in range(3):
            job = await app.enqueue("t")
            ids.append(job.id)
            for _ in range(100):
                if job.id in started:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)  # the worker claims again (and registers) after each
        assert started == ids
        assert delivered == ids  # each came through the inbox, not a claim
    finally:
        worker.stop()
        await asyncio.wait_for(running, 10)
        assert await client.zcard(backend.keys.idle("default")) == 0
        await app.close()


async def test_a_handed_job_starts_before_the_worker_pops_again(
    url: str, client: aioredis.Redis
) -> None:
    """Popping again first would delay every handed job by the client work of
    a pop, which is most of what an idle worker adds to pickup latency."""
    app = Conveyor(url, poll_interval="5s")
    events: list[str] = []

    @app.task("t")
    async def record(ctx: JobContext) -> None:
        events.append("start")

    backend = await app.connect()
    assert isinstance(backend, RedisBackend)
    pop = backend.next_handoff

    async def logging_pop(worker_id: str, timeout: float) -> list[Handoff] | None:
        events.append("pop")
        handed = await pop(worker_id, timeout)
        if handed:
            events.append("handed")
        return handed

    backend.next_handoff = logging_pop  # type: ignore[method-assign]
    worker, running = await _idle_worker(app, backend, client)
    try:
        await app.enqueue("t")
        for _ in range(200):
            if "handed" in events and events[-1] == "pop":
                break
            await asyncio.sleep(0.01)
        assert "handed" in events, f"nothing was handed: {events}"
        handed = events.index("handed")
        assert events[handed : handed + 3] == ["handed", "start", "pop"]
    finally:
        worker.stop()
        await asyncio.wait_for(running, 10)
        await app.close()


async def test_a_worker_with_capped_tasks_is_woken_not_handed_work(
    url: str, client: aioredis.Redis
) -> None:
    app = Conveyor(url, poll_interval="5s")
    done = asyncio.Event()

    @app.task("t", concurrency=1)
    async def capped(ctx: JobContext) -> None:
        done.set()

    backend = await app.connect()
    assert isinstance(backend, RedisBackend)
    worker = app.worker(queues=["default"], concurrency=4, install_signals=False)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0.3)
        assert await client.zcard(backend.keys.idle("default")) == 0
        await app.enqueue("t")
        await asyncio.wait_for(done.wait(), 2.0)  # woken by the notification
    finally:
        worker.stop()
        await asyncio.wait_for(running, 10)
        await app.close()


async def test_a_handoff_that_waited_past_the_trusted_lease_is_released_not_run(
    url: str,
) -> None:
    """Its lease may be gone (stall recovery) and the job running elsewhere."""
    app = Conveyor(url, poll_interval="5s", lease="10s")
    ran: list[str] = []

    @app.task("t")
    async def record(ctx: JobContext) -> None:
        ran.append(ctx.job.id)

    backend = await app.connect()
    worker = app.worker(queues=["elsewhere"], concurrency=2, install_signals=False)
    started = asyncio.Event()
    app.on("worker_started", lambda event, **data: started.set())
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(started.wait(), 10)
        job = await app.enqueue("t")
        claim = await backend.claim_jobs(ClaimRequest(worker.id, ["default"], 1, 10.0))
        assert [j.id for j in claim.jobs] == [job.id]
        worker.take(claim, time.monotonic() - 9.0)  # trusted for 8 of the 10 s
        for _ in range(100):
            stored = await app.get_job(job.id)
            if stored is not None and stored.state is JobState.WAITING:
                break
            await asyncio.sleep(0.02)
        assert stored is not None
        assert stored.state is JobState.WAITING
        assert stored.attempts == 0  # given back, as a release does
        assert ran == []
        assert not worker.active
        assert not worker.buffered
    finally:
        worker.stop()
        await asyncio.wait_for(running, 10)
        await app.close()

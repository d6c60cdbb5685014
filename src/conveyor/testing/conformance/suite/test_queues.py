"""Queues: configuration, pause, listing, counts per state, oldest waiting job."""

from __future__ import annotations

from conveyor.backends.base import Backend, Outcome, QueueInfo
from conveyor.job import FailureReason, JobState

from .helpers import claim, claim_exact, enqueue, enqueue_one, error, new_job, settle_ok

ALL_STATES = {state.value for state in JobState}


async def queues_by_name(backend: Backend) -> dict[str, QueueInfo]:
    return {q.name: q for q in await backend.list_queues()}


async def test_configure_and_list(backend: Backend) -> None:
    await backend.configure_queue(QueueInfo("emails", max_size=100, ttl=30.0))
    info = (await queues_by_name(backend))["emails"]
    assert (info.paused, info.max_size, info.ttl) == (False, 100, 30.0)
    await backend.configure_queue(QueueInfo("emails", max_size=None, ttl=5.0))
    info = (await queues_by_name(backend))["emails"]
    assert (info.max_size, info.ttl) == (None, 5.0)


async def test_configure_keeps_paused(backend: Backend) -> None:
    await backend.configure_queue(QueueInfo("emails", max_size=10, ttl=None))
    await backend.set_queue_paused("emails", True)
    await backend.configure_queue(QueueInfo("emails", max_size=20, ttl=None))
    info = (await queues_by_name(backend))["emails"]
    assert info.paused is True
    assert info.max_size == 20
    await backend.set_queue_paused("emails", False)
    assert (await queues_by_name(backend))["emails"].paused is False


async def test_pause_an_unconfigured_queue(backend: Backend) -> None:
    await backend.set_queue_paused("ad-hoc", True)
    info = (await queues_by_name(backend))["ad-hoc"]
    assert info.paused is True
    assert info.max_size is None
    assert info.ttl is None


async def test_list_includes_queues_that_only_hold_jobs(backend: Backend) -> None:
    await enqueue(backend, new_job(queue="implicit"))
    await backend.configure_queue(QueueInfo("configured", max_size=None, ttl=None))
    queues = await queues_by_name(backend)
    assert set(queues) == {"implicit", "configured"}
    assert queues["implicit"] == QueueInfo("implicit") or (
        queues["implicit"].paused is False and queues["implicit"].max_size is None
    )


async def test_queue_counts_cover_every_state(backend: Backend) -> None:
    await enqueue(backend, new_job(queue="q"), new_job(queue="q"), new_job(queue="q"))
    await enqueue(backend, new_job(queue="q", delay=60), new_job(queue="q"), new_job(queue="q"))
    a, b, c, d = (await claim(backend, ["q"], limit=4)).jobs
    await settle_ok(backend, a, Outcome.COMPLETE)
    await settle_ok(backend, b, Outcome.FAIL, error=error(), failure_reason=FailureReason.ERROR)
    cancelled = await enqueue_one(backend, queue="q")
    await backend.cancel_job(cancelled.id)
    await backend.configure_queue(QueueInfo("empty", max_size=None, ttl=None))
    await enqueue(backend, new_job(queue="q", depends_on=[c.id]))

    counts = await backend.queue_counts()
    assert counts["q"] == {
        "blocked": 1,
        "waiting": 1,
        "delayed": 1,
        "active": 2,
        "completed": 1,
        "failed": 1,
        "cancelled": 1,
    }
    assert counts["empty"] == dict.fromkeys(ALL_STATES, 0)
    await settle_ok(backend, c, Outcome.RELEASE)
    assert (await backend.queue_counts())["q"]["waiting"] == 2
    assert (await backend.queue_counts())["q"]["active"] == 1
    assert d.state is JobState.ACTIVE


async def test_queue_counts_with_nothing(backend: Backend) -> None:
    assert await backend.queue_counts() == {}


async def test_oldest_waiting(backend: Backend) -> None:
    now = await backend.now()
    await enqueue(
        backend,
        new_job(queue="a", run_at=now - 30),
        new_job(queue="a", run_at=now - 10),
        new_job(queue="a", run_at=now - 50, priority=5),
        new_job(queue="b", run_at=now - 5),
        new_job(queue="c", delay=60),
    )
    await enqueue(backend, new_job(queue="d", run_at=now - 100))
    old_d = (await claim(backend, ["d"])).jobs[0]
    oldest = await backend.oldest_waiting()
    assert oldest == {"a": now - 50, "b": now - 5}
    assert old_d.queue == "d"


async def test_oldest_waiting_moves_on_when_the_oldest_is_claimed(backend: Backend) -> None:
    now = await backend.now()
    first, second = await enqueue(
        backend, new_job(queue="a", run_at=now - 30), new_job(queue="a", run_at=now - 10)
    )
    await claim_exact(backend, first)
    assert await backend.oldest_waiting() == {"a": second.run_at}

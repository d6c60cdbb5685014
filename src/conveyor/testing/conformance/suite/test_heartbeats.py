"""Worker heartbeats: upserted with the backend's clock, listed, removed, pruned."""

from __future__ import annotations

import asyncio

from conveyor.backends.base import Backend, WorkerInfo

from .helpers import CLOCK_SLACK, again_when_late, ran_before

#: Prunes use a short age, so "fresh" must mean: provably pruned within it.
MAX_AGE = 0.15


def worker(worker_id: str = "w-1", active: int = 0, **fields: object) -> WorkerInfo:
    values: dict[str, object] = {
        "id": worker_id,
        "host": "box-1",
        "pid": 4242,
        "queues": ["default", f"worker.{worker_id}"],
        "concurrency": 50,
        "active": active,
        "started_at": 1000.0,
    }
    values.update(fields)
    return WorkerInfo(**values)  # type: ignore[arg-type]


async def test_record_and_list(backend: Backend) -> None:
    before = await backend.now()
    await backend.record_heartbeat(worker())
    after = await backend.now()
    (seen,) = await backend.list_workers()
    assert seen.id == "w-1"
    assert seen.host == "box-1"
    assert seen.pid == 4242
    assert seen.queues == ["default", "worker.w-1"]
    assert seen.concurrency == 50
    assert seen.active == 0
    assert seen.started_at == 1000.0
    assert before <= seen.last_seen <= after


async def test_last_seen_is_the_backend_clock_not_the_caller(backend: Backend) -> None:
    await backend.record_heartbeat(worker(last_seen=12.0))
    (seen,) = await backend.list_workers()
    assert abs(seen.last_seen - await backend.now()) < CLOCK_SLACK


async def test_heartbeat_updates_in_place(backend: Backend) -> None:
    await backend.record_heartbeat(worker(active=1))
    (first,) = await backend.list_workers()
    await asyncio.sleep(0.02)
    await backend.record_heartbeat(worker(active=7, queues=["emails"]))
    (second,) = await backend.list_workers()
    assert second.active == 7
    assert second.queues == ["emails"]
    assert second.last_seen > first.last_seen


async def test_many_workers_and_remove(backend: Backend) -> None:
    for name in ("w-1", "w-2", "w-3"):
        await backend.record_heartbeat(worker(name))
    assert {w.id for w in await backend.list_workers()} == {"w-1", "w-2", "w-3"}
    await backend.remove_worker("w-2")
    await backend.remove_worker("never-was")
    assert {w.id for w in await backend.list_workers()} == {"w-1", "w-3"}


async def test_listed_workers_are_copies(backend: Backend) -> None:
    await backend.record_heartbeat(worker())
    (seen,) = await backend.list_workers()
    seen.queues.append("tampered")
    seen.active = 99
    (again,) = await backend.list_workers()
    assert again.queues == ["default", "worker.w-1"]
    assert again.active == 0


async def test_heartbeats_are_shared(backend_pair: tuple[Backend, Backend]) -> None:
    first, second = backend_pair
    await first.record_heartbeat(worker("w-9"))
    assert [w.id for w in await second.list_workers()] == ["w-9"]


# -- the worker's own heartbeat interval, and pruning --------------------------


async def test_heartbeat_interval_is_stored_and_listed(backend: Backend) -> None:
    await backend.record_heartbeat(worker("w-1", heartbeat_interval=2.5))
    await backend.record_heartbeat(worker("w-2"))
    listed = {w.id: w for w in await backend.list_workers()}
    assert listed["w-1"].heartbeat_interval == 2.5
    assert listed["w-2"].heartbeat_interval == 10.0  # the default
    assert listed["w-1"].to_dict()["heartbeat_interval"] == 2.5


async def test_heartbeat_interval_updates_in_place(backend: Backend) -> None:
    await backend.record_heartbeat(worker(heartbeat_interval=2.5))
    await backend.record_heartbeat(worker(heartbeat_interval=0.5))
    (seen,) = await backend.list_workers()
    assert seen.heartbeat_interval == 0.5


async def test_heartbeat_interval_is_shared(backend_pair: tuple[Backend, Backend]) -> None:
    first, second = backend_pair
    await first.record_heartbeat(worker("w-9", heartbeat_interval=0.25))
    (seen,) = await second.list_workers()
    assert seen.heartbeat_interval == 0.25


@again_when_late
async def test_prune_workers_deletes_the_ones_not_seen_lately(backend: Backend) -> None:
    await backend.record_heartbeat(worker("old-1"))
    await backend.record_heartbeat(worker("old-2"))
    await asyncio.sleep(0.3)
    heard = await backend.now()
    await backend.record_heartbeat(worker("fresh"))
    first = await backend.prune_workers(MAX_AGE)
    second = await backend.prune_workers(MAX_AGE)
    await ran_before(backend, heard + MAX_AGE, "the prunes")  # "fresh" was fresh for both
    assert first == 2
    assert second == 0
    assert [w.id for w in await backend.list_workers()] == ["fresh"]
    assert await backend.prune_workers(60) == 0
    assert [w.id for w in await backend.list_workers()] == ["fresh"]


async def test_prune_workers_uses_the_backend_clock_not_the_callers(backend: Backend) -> None:
    await backend.record_heartbeat(worker(last_seen=1.0))  # ignored: last_seen is now
    assert await backend.prune_workers(30) == 0
    assert len(await backend.list_workers()) == 1


async def test_prune_workers_on_an_empty_store(backend: Backend) -> None:
    assert await backend.prune_workers(0) == 0


@again_when_late
async def test_a_worker_heard_from_again_is_not_pruned(backend: Backend) -> None:
    await backend.record_heartbeat(worker("w-1"))
    await asyncio.sleep(0.3)
    heard = await backend.now()
    await backend.record_heartbeat(worker("w-1", active=3))
    pruned = await backend.prune_workers(MAX_AGE)
    await ran_before(backend, heard + MAX_AGE, "the prune")
    assert pruned == 0
    (seen,) = await backend.list_workers()
    assert seen.active == 3

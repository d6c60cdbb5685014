"""Worker heartbeats: upserted with the backend's clock, listed, removed."""

from __future__ import annotations

import asyncio

from conveyor.backends.base import Backend, WorkerInfo

from .helpers import CLOCK_SLACK


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

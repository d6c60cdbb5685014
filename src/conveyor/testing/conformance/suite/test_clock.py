"""The backend's clock (G11): close to wall time, never backwards, used for every stamp."""

from __future__ import annotations

import asyncio
import time

from conveyor.backends.base import Backend, Outcome

from .helpers import CLOCK_SLACK, claim_one, enqueue, enqueue_one, new_job, settle_ok


async def test_now_is_close_to_the_wall_clock(backend: Backend) -> None:
    assert abs(await backend.now() - time.time()) < 1.0


async def test_now_never_goes_backwards(backend: Backend) -> None:
    readings = [await backend.now() for _ in range(50)]
    assert readings == sorted(readings)
    await asyncio.sleep(0.02)
    assert await backend.now() > readings[-1]


async def test_ping(backend: Backend) -> None:
    latency = await backend.ping()
    assert isinstance(latency, float)
    assert 0 <= latency < 1.0


async def test_created_and_run_at_come_from_backend_now(backend: Backend) -> None:
    before = await backend.now()
    job, later = await enqueue(backend, new_job(), new_job(delay=2.5))
    after = await backend.now()
    assert before <= job.created_at <= after
    assert job.run_at == job.created_at
    assert abs(later.run_at - (later.created_at + 2.5)) < 1e-3


async def test_lease_until_is_started_at_plus_lease(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend, lease=7)
    assert job.started_at is not None
    assert job.lease_until is not None
    assert abs(job.lease_until - (job.started_at + 7)) < 1e-3


async def test_retry_run_at_from_backend_now(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend)
    now = await backend.now()
    await settle_ok(backend, job, Outcome.RETRY, retry_delay=4)
    stored = await backend.get_job(job.id)
    assert stored is not None
    assert abs(stored.run_at - (now + 4)) < CLOCK_SLACK


async def test_finished_at_from_backend_now(backend: Backend) -> None:
    await enqueue_one(backend)
    job = await claim_one(backend)
    before = await backend.now()
    await settle_ok(backend, job, Outcome.COMPLETE)
    after = await backend.now()
    stored = await backend.get_job(job.id)
    assert stored is not None
    assert stored.finished_at is not None
    assert before <= stored.finished_at <= after

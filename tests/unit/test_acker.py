"""The acker: ``stored()`` (a wait until the outcomes added so far are answered),
``unsettled()`` and its retries."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conveyor import BackendUnavailable, Conveyor, JobContext
from conveyor.backends.base import ClaimRequest, Outcome, Settlement
from conveyor.worker.acker import Acker


async def test_stored_waits_for_the_flush_that_answers_what_was_added() -> None:
    app = Conveyor("memory://")

    @app.task("t")
    async def t(ctx: JobContext) -> None:
        return None

    backend = await app.connect()
    await app.enqueue("t")
    await app.enqueue("t")
    claimed = await backend.claim_jobs(
        ClaimRequest(worker_id="w", queues=["default"], limit=2, lease=30.0)
    )
    first, second = claimed.jobs
    acker = Acker(backend, lambda ids: None, lambda changes: None, lambda jobs: None)
    assert acker.answered
    await asyncio.wait_for(acker.stored(), 1)  # nothing added: at once

    acker.add(Settlement(first.id, first.lease_token or "", Outcome.COMPLETE, "t"), first)
    assert not acker.answered
    waiting = asyncio.ensure_future(acker.stored())
    acker.add(Settlement(second.id, second.lease_token or "", Outcome.COMPLETE, "t"), second)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.shield(waiting), 0.05)  # no flush yet
    flushing = asyncio.create_task(acker.run())
    try:
        await asyncio.wait_for(waiting, 1)
        await asyncio.wait_for(acker.stored(), 1)
        assert acker.answered
        done = await backend.get_jobs([first.id, second.id])
        assert [job.state.value for job in done] == ["completed", "completed"]
    finally:
        flushing.cancel()
        await app.close()


async def test_unsettled_names_outcomes_until_stored_and_retries_restart_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the store refuses a flush, its outcomes are named by ``unsettled``
    (their leases are renewed meanwhile); once stored they are not. After a
    flush that got through, the next failure is retried after the shortest
    pause again, not the longest one reached in the outage before."""
    from conveyor.worker import acker as acker_module

    monkeypatch.setattr(acker_module, "RETRY_FIRST", 0.01)
    monkeypatch.setattr(acker_module, "RETRY_MAX", 5.0)
    app = Conveyor("memory://")

    @app.task("t")
    async def t(ctx: JobContext) -> None:
        return None

    backend = await app.connect()
    for _ in range(3):
        await app.enqueue("t")
    claimed = await backend.claim_jobs(
        ClaimRequest(worker_id="w", queues=["default"], limit=3, lease=30.0)
    )
    first, second, third = claimed.jobs
    original = backend.settle_jobs
    calls: list[float] = []
    fail = {"first": 6, "second": 1}

    async def flaky(settlements: Any) -> Any:
        calls.append(asyncio.get_running_loop().time())
        ids = {s.job_id for s in settlements}
        if first.id in ids and fail["first"]:
            fail["first"] -= 1
            assert acker.unsettled() == [(first.id, first.lease_token)]
            raise BackendUnavailable("restarting")
        if first.id in ids:  # gets through; meanwhile the next outcome comes
            acker.add(
                Settlement(second.id, second.lease_token or "", Outcome.COMPLETE, "t"), second
            )
        elif fail["second"]:
            fail["second"] -= 1
            raise BackendUnavailable("restarting again")
        return await original(settlements)

    backend.settle_jobs = flaky  # type: ignore[method-assign]
    acker = Acker(backend, lambda ids: None, lambda changes: None, lambda jobs: None)
    flushing = asyncio.create_task(acker.run())
    try:
        acker.add(Settlement(first.id, first.lease_token or "", Outcome.COMPLETE, "t"), first)
        await asyncio.wait_for(acker.drain(5), 5)
        assert acker.unsettled() == []
        # 6 failures (pauses 0.01 .. 0.32 s), the one that got through, then
        # the second outcome: refused once, retried after 0.01 s, not 0.64 s.
        assert len(calls) == 9
        assert calls[8] - calls[7] < 0.3, calls
        done = await backend.get_jobs([first.id, second.id, third.id])
        assert [job.state.value for job in done] == ["completed", "completed", "active"]
    finally:
        flushing.cancel()
        await app.close()

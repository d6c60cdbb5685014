"""The acker's ``stored()``: a wait until the outcomes added so far are answered."""

from __future__ import annotations

import asyncio

import pytest

from conveyor import Conveyor, JobContext
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

"""A read-only PostgreSQL database (``default_transaction_read_only``, as on a
standby): reads work, writes raise BackendUnavailable naming the fault, and
once the database takes writes again the pool's read-only sessions are
replaced rather than failing every write until they age out."""

from __future__ import annotations

import pytest
from postgres_databases import own_database

from conveyor.app import Conveyor
from conveyor.errors import BackendUnavailable
from conveyor.job import JobState

POOL = 4


def app_on(url: str) -> Conveyor:
    app = Conveyor(f"{url}?pool_size={POOL}")

    @app.task("ro.noop")
    async def noop() -> None:
        return None

    return app


async def test_an_app_opens_and_reads_a_read_only_database() -> None:
    """Opening warms each connection with the claim's writes: refused on a
    read-only database, that must not fail the open (it did, with "another
    operation is in progress": connections went back to the pool mid-warm-up)."""
    async with own_database() as db:
        writer = app_on(db.url)
        try:
            job = await writer.enqueue("ro.noop")
        finally:
            await writer.close()
        await db.set_read_only(True)

        app = app_on(db.url)
        try:
            await app.connect()
            assert await app.count_jobs() == 1
            stored = await app.get_job(job.id)
            assert stored is not None
            assert stored.state is JobState.WAITING
            with pytest.raises(BackendUnavailable, match=r"read-only.*nothing was written"):
                await app.enqueue("ro.noop")
            assert await app.count_jobs() == 1
        finally:
            await app.close()


async def test_writes_resume_when_the_database_takes_writes_again() -> None:
    """Sessions opened while the database was read-only stay read-only; each
    one that refuses a write is dropped, so writes succeed again within a
    pool's worth of attempts, with no session ended from outside."""
    async with own_database() as db:
        writer = app_on(db.url)
        await writer.connect()
        await writer.close()
        await db.set_read_only(True)
        app = app_on(db.url)
        try:
            await app.connect()
            await db.set_read_only(False, end_sessions=False)
            refusals: list[str] = []
            for _ in range(POOL + 1):
                try:
                    await app.enqueue("ro.noop")
                    break
                except BackendUnavailable as exc:
                    refusals.append(str(exc))
            else:
                raise AssertionError(f"{POOL + 1} enqueues refused: read-only sessions were kept")
            assert all("read-only" in text for text in refusals), refusals
            refused = len(refusals)
            assert refused >= 1, "no session was read-only: the test proved nothing"
            assert await app.count_jobs() == 1
        finally:
            await app.close()

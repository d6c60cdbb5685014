"""The SQLite backend: the embedded default, a file next to the app.

Four connections, each owned by its own thread (see connection.py):

- the **writer** runs every write transaction (``BEGIN IMMEDIATE``), one
  contract operation per executor hop;
- the **reader** serves reads, which in WAL mode never queue behind writes;
- the **watcher**, a small one, polls ``PRAGMA data_version`` every 5 ms while
  a worker waits, to see other processes' commits within milliseconds;
- the **checkpointer** copies the WAL back into the database file in the
  background, so the writer's commits never pay for it (see checkpoint.py).

Durability, WAL and multi-process use: docs/explanation/sqlite.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence

from conveyor.backends import base
from conveyor.backends.claims import ClaimKeeper
from conveyor.backends.sqlite import admin, ops
from conveyor.backends.sqlite import schedules as schedules_sql
from conveyor.backends.sqlite import stats as stats_sql
from conveyor.backends.sqlite.checkpoint import Checkpointer
from conveyor.backends.sqlite.connection import WRITER_TUNING, ThreadConnection
from conveyor.backends.sqlite.migrate import LATEST, migrate, user_version
from conveyor.backends.sqlite.url import SQLiteOptions, parse_url
from conveyor.backends.worksignal import WorkSignal
from conveyor.errors import BackendError
from conveyor.job import Job
from conveyor.settings import Settings

logger = logging.getLogger("conveyor.backends.sqlite")

#: How often a waiting worker looks for other processes' commits.
COMMIT_POLL_INTERVAL = 0.005
#: Added to a delayed job's due time, so the claim after the wait sees it as due
#: (event loop timers may fire up to a clock tick early).
DUE_SLACK = 0.002


class SQLiteBackend(base.Backend):
    """Jobs in one SQLite file (WAL), shared by every process on this host."""

    def __init__(self, url: str, settings: Settings | None = None) -> None:
        self.url = url
        self.options: SQLiteOptions = parse_url(url, settings)
        self._checkpointer = Checkpointer(self.options)
        self._writer = ThreadConnection(
            self.options,
            "writer",
            pragmas=WRITER_TUNING,
            after_commit=self._checkpointer.after_commit,
        )
        self._reader = ThreadConnection(self.options, "reader")
        self._watcher = ThreadConnection(self.options, "watcher", tune=False)
        self._signal = WorkSignal()
        self._lock: asyncio.Lock | None = None
        self._opened = False
        self._seen_version: int | None = None
        self._poller: asyncio.Task[None] | None = None
        self._claims = ClaimKeeper(self.settle_jobs, lambda: self._writer.is_open)

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.url!r})"

    # -- lifecycle -----------------------------------------------------------

    async def open(self) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._opened:
                return
            try:
                await self._writer.open()
                if await self._writer.call(user_version) != LATEST:
                    await self._writer.write(migrate)  # re-checked under the write lock
                await self._reader.open()
                await self._watcher.open()
                self._seen_version = await self._watcher.call(admin.data_version)
                self._checkpointer.start()
            except BaseException:
                await self._close_connections()
                raise
            self._signal = WorkSignal()
            self._opened = True

    async def close(self) -> None:
        # Let claims in flight finish, and give the jobs of orphaned ones back.
        await self._claims.wait()
        self._opened = False
        poller, self._poller = self._poller, None
        if poller is not None and not poller.done():
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                await poller
        self._signal.close()
        await self._close_connections()

    async def _close_connections(self) -> None:
        for conn in (self._watcher, self._reader, self._writer):
            await conn.close()
        self._checkpointer.stop()

    async def now(self) -> float:
        return time.time()

    async def ping(self) -> float:
        started = time.perf_counter()
        await self._reader.call(admin.ping)
        return time.perf_counter() - started

    # -- jobs: the hot path --------------------------------------------------

    async def enqueue_jobs(self, jobs: Sequence[base.NewJob]) -> list[Job]:
        if not jobs:
            return []
        created = await self._writer.write(ops.enqueue, list(jobs))
        self._signal.notify({job.queue for job in created if not job.duplicate})
        return created

    async def claim_jobs(self, request: base.ClaimRequest) -> base.ClaimResult:
        return await self._claims.run(self._writer.start_write(ops.claim, request))

    async def renew_leases(
        self, worker_id: str, leases: Sequence[tuple[str, str]], lease: float
    ) -> base.RenewResult:
        if not leases:
            return base.RenewResult()
        return await self._writer.write(ops.renew, list(leases), lease)

    async def settle_jobs(self, settlements: Sequence[base.Settlement]) -> base.SettleResult:
        if not settlements:
            return base.SettleResult()
        result, wake = await self._writer.write(ops.settle, list(settlements))
        self._signal.notify(wake)
        return result

    async def save_progress(self, items: Sequence[tuple[str, str, bytes]]) -> set[str]:
        if not items:
            return set()
        return await self._writer.write(ops.save_progress, list(items))

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        wanted = frozenset(queues)
        if self._signal.take_pending(wanted):
            return
        future = self._signal.add(wanted)
        try:
            self._ensure_poller()
            if wanted:
                due = await self._watcher.call(admin.next_due, sorted(wanted))
                if due is not None:  # a delayed job becomes due before the timeout
                    timeout = min(timeout, due - time.time() + DUE_SLACK)
            if timeout > 0 and not future.done():
                await asyncio.wait([future], timeout=timeout)
        finally:
            self._signal.remove(future)

    def _ensure_poller(self) -> None:
        loop = asyncio.get_running_loop()
        poller = self._poller
        if poller is None or poller.done() or poller.get_loop() is not loop:
            self._poller = loop.create_task(self._poll_commits(), name="conveyor-sqlite-watch")

    async def _poll_commits(self) -> None:
        """While anyone waits: wake them all when another connection committed."""
        try:
            while self._signal.has_waiters:
                version = await self._watcher.call(admin.data_version)
                if version != self._seen_version:
                    self._seen_version = version
                    self._signal.notify_all()
                await asyncio.sleep(COMMIT_POLL_INTERVAL)
        except BackendError:
            self._signal.notify_all()  # the waiters' next claim reports the problem

    # -- jobs: reading and acting --------------------------------------------

    async def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        if not job_ids:
            return []
        return await self._reader.call(admin.get_jobs, list(job_ids))

    async def list_jobs(
        self, where: base.JobFilter, limit: int = 100, offset: int = 0
    ) -> list[Job]:
        return await self._reader.call(admin.list_jobs, where, limit, offset)

    async def count_jobs(self, where: base.JobFilter) -> int:
        return await self._reader.call(admin.count_jobs, where)

    async def cancel_job(self, job_id: str) -> Job | None:
        return await self._writer.write(admin.cancel_job, job_id)

    async def cancel_requests(self, job_ids: Sequence[str]) -> set[str]:
        if not job_ids:
            return set()
        return await self._reader.call(admin.cancel_requests, list(job_ids))

    async def retry_failed(self, job_id: str, new_id: str) -> Job:
        job = await self._writer.write(admin.retry_failed, job_id, new_id)
        self._signal.notify([job.queue])
        return job

    async def delete_jobs(self, job_ids: Sequence[str]) -> int:
        if not job_ids:
            return 0
        return await self._writer.write(admin.delete_jobs, list(job_ids))

    async def purge_jobs(self, where: base.JobFilter) -> int:
        total = 0
        while True:  # chunked: other writers get the lock between chunks
            deleted = await self._writer.write(admin.purge_chunk, where)
            total += deleted
            if deleted < admin.CHUNK:
                return total

    async def queue_counts(self) -> dict[str, dict[str, int]]:
        return await self._reader.read(admin.queue_counts)

    async def oldest_waiting(self) -> dict[str, float]:
        return await self._reader.call(admin.oldest_waiting)

    # -- maintenance ---------------------------------------------------------

    async def recover_stalled(self, max_stalled: int) -> base.StallResult:
        result = await self._writer.write(admin.recover_stalled, max_stalled)
        self._signal.notify({job.queue for job in result.requeued})
        return result

    async def prune_jobs(self, rules: Sequence[base.PruneRule]) -> int:
        total = 0
        for rule in rules:
            while True:  # chunked, until the rule has nothing left to delete
                deleted = await self._writer.write(admin.prune_chunk, rule)
                total += deleted
                if not deleted:
                    break
        await self._writer.write(admin.prune_history)
        return total

    # -- queues --------------------------------------------------------------

    async def configure_queue(self, name: str, max_size: int | None, ttl: float | None) -> None:
        await self._writer.write(admin.configure_queue, name, max_size, ttl)

    async def set_queue_paused(self, name: str, paused: bool) -> None:
        await self._writer.write(admin.set_queue_paused, name, paused)
        if not paused:
            self._signal.notify([name])

    async def list_queues(self) -> list[base.QueueInfo]:
        return await self._reader.read(admin.list_queues)

    # -- circuits ------------------------------------------------------------

    async def list_circuits(self) -> list[base.CircuitInfo]:
        return await self._reader.call(admin.list_circuits)

    async def reset_circuit(self, task: str) -> None:
        await self._writer.write(admin.reset_circuit, task)
        self._signal.notify_all()

    # -- heartbeats ----------------------------------------------------------

    async def record_heartbeat(self, worker: base.WorkerInfo) -> None:
        await self._writer.write(admin.record_heartbeat, worker)

    async def list_workers(self) -> list[base.WorkerInfo]:
        return await self._reader.call(admin.list_workers)

    async def remove_worker(self, worker_id: str) -> None:
        await self._writer.write(admin.remove_worker, worker_id)

    async def prune_workers(self, older_than: float) -> int:
        return await self._writer.write(admin.prune_workers, older_than)

    # -- schedules -----------------------------------------------------------

    async def sync_schedules(
        self, specs: Sequence[base.ScheduleSpec], first_fires: Mapping[str, float | None]
    ) -> list[base.ScheduleRecord]:
        return await self._writer.write(schedules_sql.sync, list(specs), dict(first_fires))

    async def list_schedules(self) -> list[base.ScheduleRecord]:
        return await self._reader.read(schedules_sql.list_all)

    async def update_schedule(
        self,
        name: str,
        *,
        paused: bool | None = None,
        cron: str | None = None,
        every: float | None = None,
        next_fire_at: float | None = None,
        reschedule: bool = False,
    ) -> base.ScheduleRecord | None:
        change = schedules_sql.ScheduleChange(name, paused, cron, every, next_fire_at, reschedule)
        return await self._writer.write(schedules_sql.update, change)

    async def advance_schedule(
        self, name: str, fired_at: float, next_fire_at: float | None, *, fired: bool = True
    ) -> bool:
        return await self._writer.write(schedules_sql.advance, name, fired_at, next_fire_at, fired)

    async def delete_schedules(self, names: Sequence[str]) -> int:
        if not names:
            return 0
        return await self._writer.write(schedules_sql.delete, list(names))

    # -- job statistics ----------------------------------------------------
    async def record_job_stats(self, stats: Sequence[base.JobStat]) -> None:
        if stats:
            await self._writer.write(stats_sql.record, list(stats))

    async def job_stat_totals(self) -> list[base.JobStat]:
        return await self._reader.call(stats_sql.totals)

    async def job_stat_series(self, since: float) -> list[base.JobStat]:
        return await self._reader.call(stats_sql.series, since)

    async def prune_job_stats(self, older_than: float) -> int:
        return await self._writer.write(stats_sql.prune, older_than)

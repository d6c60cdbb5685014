"""The SQLite backend: the embedded default, a file next to the app.

Four connections, each owned by its own thread (see connection.py):

- the **writer** runs every write transaction (``BEGIN IMMEDIATE``), one
  contract operation per executor hop;
- the **reader** serves reads, which in WAL mode never queue behind writes;
- the **watcher**, a small one, polls ``PRAGMA data_version`` every 5 ms while
  a worker waits, to see other processes' commits within milliseconds;
- the **checkpointer** copies the WAL back into the database file in the
  background, so the writer's commits never pay for it (see checkpoint.py).

Each operation's transaction lives in its area module (enqueue.py, claim.py,
settle.py, reads.py, admin.py, maintenance.py, schedules.py, stats.py); this
class picks the connection it runs on and wakes waiters afterwards.
Durability, WAL and multi-process use: docs/explanation/sqlite.md.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Mapping, Sequence

from conveyor.backends import base
from conveyor.backends.claims import ClaimKeeper
from conveyor.backends.schedulechange import ScheduleChange, UpdateScheduleByChange
from conveyor.backends.sqlite import (
    admin,
    claim,
    enqueue,
    maintenance,
    reads,
    schedules,
    settle,
)
from conveyor.backends.sqlite import stats as stats_sql
from conveyor.backends.sqlite.checkpoint import Checkpointer
from conveyor.backends.sqlite.connection import ThreadConnection
from conveyor.backends.sqlite.dispatch import DispatchStore
from conveyor.backends.sqlite.migrate import LATEST, migrate, user_version
from conveyor.backends.sqlite.queries import P
from conveyor.backends.sqlite.url import SQLiteOptions, parse_url
from conveyor.job import Job
from conveyor.ratelimit import RateLimit
from conveyor.settings import Settings

logger = logging.getLogger("conveyor.backends.sqlite")


def _settle_then_claim(
    conn: sqlite3.Connection, settlements: list[base.Settlement], request: base.ClaimRequest
) -> tuple[base.SettleResult, set[str], base.ClaimResult]:
    """settle_and_claim's transaction: the claim's clock is read after the
    settle's, so what the settle released is due to it."""
    result, wake = settle.settle(conn, settlements)
    return result, wake, claim.claim(conn, request)


def _claimed(answer: tuple[base.SettleResult, set[str], base.ClaimResult]) -> base.ClaimResult:
    return answer[2]


class SQLiteBackend(UpdateScheduleByChange, base.Backend):
    """Jobs in one SQLite file (WAL), shared by every process on this host."""

    def __init__(self, url: str, settings: Settings | None = None) -> None:
        self.url = url
        self.options: SQLiteOptions = parse_url(url, settings)
        self._checkpointer = Checkpointer(self.options)
        self._writer = ThreadConnection(
            self.options,
            "writer",
            pragmas=P.writer_tuning,
            after_commit=self._checkpointer.after_commit,
        )
        self._reader = ThreadConnection(self.options, "reader")
        self._watcher = ThreadConnection(self.options, "watcher", tune=False)
        self._waits = claim.CommitWatch(self._watcher)
        self._lock: asyncio.Lock | None = None
        self._opened = False
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
                await self._waits.start()
                self._checkpointer.start()
            except BaseException:
                await self._close_connections()
                raise
            self._waits.reset()
            self._opened = True

    async def close(self) -> None:
        # Let claims in flight finish, and give the jobs of orphaned ones back.
        await self._claims.wait()
        self._opened = False
        await self._waits.stop()
        await self._close_connections()

    async def _close_connections(self) -> None:
        for conn in (self._watcher, self._reader, self._writer):
            await conn.close()
        self._checkpointer.stop()

    def dispatch_store(self) -> DispatchStore:
        """The queries of RabbitMQ dispatch on this file (not in the contract)."""
        return DispatchStore(self._writer, self._reader, self._waits)

    async def now(self) -> float:
        return time.time()

    async def ping(self) -> float:
        started = time.perf_counter()
        await self._reader.call(reads.ping)
        return time.perf_counter() - started

    # -- jobs: the hot path --------------------------------------------------

    async def enqueue_jobs(self, jobs: Sequence[base.NewJob]) -> list[Job]:
        if not jobs:
            return []
        created = await self._writer.write(enqueue.enqueue, list(jobs))
        self._waits.signal.notify({job.queue for job in created if not job.duplicate})
        return created

    async def claim_jobs(self, request: base.ClaimRequest) -> base.ClaimResult:
        return await self._claims.run(self._writer.start_write(claim.claim, request))

    async def renew_leases(
        self, worker_id: str, leases: Sequence[tuple[str, str]], lease: float
    ) -> base.RenewResult:
        if not leases:
            return base.RenewResult()
        return await self._writer.write(settle.renew, list(leases), lease)

    async def settle_jobs(self, settlements: Sequence[base.Settlement]) -> base.SettleResult:
        if not settlements:
            return base.SettleResult()
        result, wake = await self._writer.write(settle.settle, list(settlements))
        self._waits.signal.notify(wake)
        return result

    async def settle_and_claim(
        self, settlements: Sequence[base.Settlement], request: base.ClaimRequest
    ) -> tuple[base.SettleResult, base.ClaimResult]:
        if not settlements:
            return base.SettleResult(), await self.claim_jobs(request)
        result, wake, claimed = await self._claims.run_part(
            self._writer.start_write(_settle_then_claim, list(settlements), request), _claimed
        )
        self._waits.signal.notify(wake)
        return result, claimed

    async def save_progress(self, items: Sequence[tuple[str, str, bytes]]) -> set[str]:
        if not items:
            return set()
        return await self._writer.write(settle.save_progress, list(items))

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        await self._waits.wait(queues, timeout)

    # -- jobs: reading and acting --------------------------------------------

    async def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        if not job_ids:
            return []
        return await self._reader.call(reads.get_jobs, list(job_ids))

    async def list_jobs(
        self, where: base.JobFilter, limit: int = 100, offset: int = 0
    ) -> list[Job]:
        return await self._reader.call(reads.list_jobs, where, limit, offset)

    async def count_jobs(self, where: base.JobFilter) -> int:
        return await self._reader.call(reads.count_jobs, where)

    async def cancel_job(self, job_id: str) -> Job | None:
        job, wake = await self._writer.write(admin.cancel_job, job_id)
        self._waits.signal.notify(wake)
        return job

    async def cancel_requests(self, job_ids: Sequence[str]) -> set[str]:
        if not job_ids:
            return set()
        return await self._reader.call(settle.cancel_requests, list(job_ids))

    async def retry_failed(self, job_id: str, new_id: str) -> Job:
        job = await self._writer.write(admin.retry_failed, job_id, new_id)
        self._waits.signal.notify([job.queue])
        return job

    async def delete_jobs(self, job_ids: Sequence[str]) -> int:
        if not job_ids:
            return 0
        return await self._writer.write(admin.delete_jobs, list(job_ids))

    async def purge_jobs(self, where: base.JobFilter) -> int:
        return await admin.purge_jobs(self._writer, where)

    async def queue_counts(self) -> dict[str, dict[str, int]]:
        return await self._reader.read(reads.queue_counts)

    async def oldest_waiting(self) -> dict[str, float]:
        return await self._reader.call(reads.oldest_waiting)

    # -- maintenance ---------------------------------------------------------

    async def recover_stalled(self, max_stalled: int) -> base.StallResult:
        result, wake = await self._writer.write(maintenance.recover_stalled, max_stalled)
        self._waits.signal.notify(wake)
        return result

    async def prune_jobs(self, rules: Sequence[base.PruneRule]) -> int:
        return await maintenance.prune_jobs(self._writer, self._reader, rules)

    # -- queues --------------------------------------------------------------

    async def configure_queue(self, info: base.QueueInfo) -> None:
        await self._writer.write(admin.configure_queue, info)

    async def set_queue_paused(self, name: str, paused: bool) -> None:
        await self._writer.write(admin.set_queue_paused, name, paused)
        if not paused:
            self._waits.signal.notify([name])

    async def list_queues(self) -> list[base.QueueInfo]:
        return await self._reader.read(reads.list_queues)

    async def tenant_counts(self, queue: str, limit: int = 100) -> list[base.TenantCount]:
        return await self._reader.read(reads.tenant_counts, queue, limit)

    async def key_counts(self, tasks: Sequence[str], limit: int = 100) -> list[base.KeyCount]:
        return await self._reader.read(reads.key_counts, list(tasks), limit)

    async def rate_key_usage(
        self, rates: Mapping[str, RateLimit], limit: int = 100
    ) -> list[base.RateKeyUse]:
        return await self._reader.read(reads.rate_key_usage, dict(rates), limit)

    # -- circuits ------------------------------------------------------------

    async def list_circuits(self) -> list[base.CircuitInfo]:
        return await self._reader.call(admin.list_circuits)

    async def reset_circuit(self, task: str) -> None:
        await self._writer.write(admin.reset_circuit, task)

    async def clear_circuit_failures(self, task: str | None) -> None:
        await self._writer.write(admin.clear_circuit_failures, task)
        self._waits.signal.notify_all()

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
        return await self._writer.write(schedules.sync, list(specs), dict(first_fires))

    async def list_schedules(self) -> list[base.ScheduleRecord]:
        return await self._reader.read(schedules.list_all)

    async def apply_schedule_change(self, change: ScheduleChange) -> base.ScheduleRecord | None:
        return await self._writer.write(schedules.update, change)

    async def advance_schedule(
        self, name: str, fired_at: float, next_fire_at: float | None, *, fired: bool = True
    ) -> bool:
        return await self._writer.write(schedules.advance, name, fired_at, next_fire_at, fired)

    async def delete_schedules(self, names: Sequence[str]) -> int:
        if not names:
            return 0
        return await self._writer.write(schedules.delete, list(names))

    # -- job statistics ------------------------------------------------------

    async def record_job_stats(self, stats: Sequence[base.JobStat]) -> None:
        if stats:
            await self._writer.write(stats_sql.record, list(stats))

    async def job_stat_totals(self) -> list[base.JobStat]:
        return await self._reader.call(stats_sql.totals)

    async def job_stat_series(self, since: float) -> list[base.JobStat]:
        return await self._reader.call(stats_sql.series, since)

    async def prune_job_stats(self, older_than: float) -> int:
        return await self._writer.write(stats_sql.prune, older_than)

"""The PostgreSQL backend: many workers on many machines, one database.

The hot path is three server-side functions (migrations/0001_initial.sql),
one round trip each: ``enqueue`` (a whole batch), ``claim`` (promotion, TTL
expiry, circuits, rate limits and the claim itself, rows taken with
``FOR UPDATE SKIP LOCKED``) and ``settle`` (every outcome of a batch, then its
circuits). Everything else is one statement from queries.sql. Each operation
lives in its area module (enqueue.py, claim.py, settle.py, reads.py, admin.py,
maintenance.py, schedules.py, stats.py); this class holds the pool, the
schema's statements and the listener, and wakes this process's waiters.
Driver choice, durability, maintenance on many machines:
docs/explanation/postgres.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from conveyor.backends import base
from conveyor.backends.claims import ClaimKeeper
from conveyor.backends.postgres import (
    admin,
    claim,
    enqueue,
    maintenance,
    reads,
    schedules,
    settle,
)
from conveyor.backends.postgres import stats as stats_sql
from conveyor.backends.postgres.connection import DRIVER_ERRORS, Pool, raise_typed
from conveyor.backends.postgres.dispatch import DispatchStore
from conveyor.backends.postgres.migrate import MigrationReport, migrate
from conveyor.backends.postgres.notify import Listener
from conveyor.backends.postgres.queries import Queries, for_schema
from conveyor.backends.postgres.transactional import run_enqueue_on
from conveyor.backends.postgres.url import PostgresOptions, parse_url
from conveyor.backends.schedulechange import ScheduleChange, UpdateScheduleByChange
from conveyor.job import Job
from conveyor.ratelimit import RateLimit
from conveyor.settings import Settings

logger = logging.getLogger("conveyor.backends.postgres")


def _claimed(answer: tuple[base.SettleResult, base.ClaimResult, set[str]]) -> base.ClaimResult:
    return answer[1]


class PostgresBackend(UpdateScheduleByChange, base.Backend):
    """Jobs in a PostgreSQL schema, shared by every process that opens it."""

    def __init__(self, url: str, settings: Settings | None = None) -> None:
        self.url = url
        self.options: PostgresOptions = parse_url(url)
        self.q: Queries = for_schema(self.options.schema, self.options.channel)
        self.pool = Pool(self.options)
        self._listener = Listener(
            self.options.dsn, self.options.channel, self.options.connect_timeout
        )
        self._waits = claim.Waits(self.pool, self.q, self._listener)
        self._lock: asyncio.Lock | None = None
        self._opened = False
        self.migration: MigrationReport | None = None
        self._claims = ClaimKeeper(self.settle_jobs, lambda: self.pool.is_open)

    def __repr__(self) -> str:
        return f"PostgresBackend(schema={self.options.schema!r})"

    # -- lifecycle -----------------------------------------------------------

    async def open(self) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._opened:
                return
            await self.pool.open()
            try:
                async with self.pool.acquire("migrate") as conn:
                    self.migration = await migrate(conn, self.options.schema, self.options.channel)
                self.pool.warm_up = [self.q.warm_claim, self.q.warm_settle]
                await self.pool.warm_all()
            except BaseException as exc:
                await self.pool.close()
                if isinstance(exc, DRIVER_ERRORS):
                    raise_typed(exc, "open")
                raise
            self._opened = True
            self._waits.enabled = True

    async def close(self) -> None:
        await self._claims.wait()  # claims in flight, and releases of orphaned ones
        self._opened = False
        await self._waits.close()
        await self.pool.close()

    def dispatch_store(self) -> DispatchStore:
        """The queries of RabbitMQ dispatch on this schema (not in the contract)."""
        return DispatchStore(self.pool, self.options.schema, self.options.channel)

    async def now(self) -> float:
        return float(await self.pool.fetchval("now", self.q.now))

    async def ping(self) -> float:
        started = time.perf_counter()
        await self.pool.fetchval("ping", self.q.ping)
        return time.perf_counter() - started

    # -- jobs: the hot path --------------------------------------------------

    async def enqueue_jobs(self, jobs: Sequence[base.NewJob]) -> list[Job]:
        if not jobs:
            return []
        created = await enqueue.enqueue_jobs(self.pool, self.q, jobs)
        self._listener.notify({job.queue for job in created if not job.duplicate})
        return created

    async def enqueue_jobs_on(self, connection: Any, jobs: Sequence[base.NewJob]) -> list[Job]:
        """Insert ``jobs`` inside the caller's open transaction on their own
        asyncpg or psycopg (3, async) connection: they commit or roll back with
        it, and workers are notified at commit."""
        if not jobs:
            return []
        return await run_enqueue_on(connection, self.q, jobs)

    async def claim_jobs(self, request: base.ClaimRequest) -> base.ClaimResult:
        return await self._claims.run(claim.claim_jobs(self.pool, self.q, request))

    async def renew_leases(
        self, worker_id: str, leases: Sequence[tuple[str, str]], lease: float
    ) -> base.RenewResult:
        if not leases:
            return base.RenewResult()
        return await settle.renew_leases(self.pool, self.q, leases, lease)

    async def settle_jobs(self, settlements: Sequence[base.Settlement]) -> base.SettleResult:
        if not settlements:
            return base.SettleResult()
        result, wake = await settle.settle_jobs(self.pool, self.q, settlements)
        if wake:
            self._listener.notify(wake)
        return result

    async def settle_and_claim(
        self, settlements: Sequence[base.Settlement], request: base.ClaimRequest
    ) -> tuple[base.SettleResult, base.ClaimResult]:
        if not settlements:
            return base.SettleResult(), await self.claim_jobs(request)
        result, claimed, wake = await self._claims.run_part(
            settle.settle_and_claim(self.pool, self.q, settlements, request), _claimed
        )
        if wake:
            self._listener.notify(wake)
        return result, claimed

    async def save_progress(self, items: Sequence[tuple[str, str, bytes]]) -> set[str]:
        if not items:
            return set()
        return await settle.save_progress(self.pool, self.q, items)

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        await self._waits.wait(queues, timeout)

    # -- jobs: reading and acting --------------------------------------------

    async def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        if not job_ids:
            return []
        return await reads.get_jobs(self.pool, self.q, job_ids)

    async def list_jobs(
        self, where: base.JobFilter, limit: int = 100, offset: int = 0
    ) -> list[Job]:
        return await reads.list_jobs(self.pool, self.q, where, limit, offset)

    async def count_jobs(self, where: base.JobFilter) -> int:
        return await reads.count_jobs(self.pool, self.q, where)

    async def cancel_job(self, job_id: str) -> Job | None:
        return await admin.cancel_job(self.pool, self.q, job_id)

    async def cancel_requests(self, job_ids: Sequence[str]) -> set[str]:
        if not job_ids:
            return set()
        return await settle.cancel_requests(self.pool, self.q, job_ids)

    async def retry_failed(self, job_id: str, new_id: str) -> Job:
        job = await admin.retry_failed(self.pool, self.q, job_id, new_id)
        self._listener.notify([job.queue])
        return job

    async def delete_jobs(self, job_ids: Sequence[str]) -> int:
        if not job_ids:
            return 0
        return await admin.delete_jobs(self.pool, self.q, job_ids)

    async def purge_jobs(self, where: base.JobFilter) -> int:
        return await admin.purge_jobs(self.pool, self.q, where)

    async def queue_counts(self) -> dict[str, dict[str, int]]:
        return await reads.queue_counts(self.pool, self.q)

    async def oldest_waiting(self) -> dict[str, float]:
        return await reads.oldest_waiting(self.pool, self.q)

    # -- maintenance ---------------------------------------------------------

    async def recover_stalled(self, max_stalled: int) -> base.StallResult:
        return await maintenance.recover_stalled(self.pool, self.q, max_stalled)

    async def prune_jobs(self, rules: Sequence[base.PruneRule]) -> int:
        return await maintenance.prune_jobs(self.pool, self.q, rules)

    # -- queues --------------------------------------------------------------

    async def configure_queue(self, info: base.QueueInfo) -> None:
        await admin.configure_queue(self.pool, self.q, info)

    async def set_queue_paused(self, name: str, paused: bool) -> None:
        await admin.set_queue_paused(self.pool, self.q, name, paused)
        if not paused:
            self._listener.notify([name])

    async def list_queues(self) -> list[base.QueueInfo]:
        return await reads.list_queues(self.pool, self.q)

    async def tenant_counts(self, queue: str, limit: int = 100) -> list[base.TenantCount]:
        return await reads.tenant_counts(self.pool, self.q, queue, limit)

    async def key_counts(self, tasks: Sequence[str], limit: int = 100) -> list[base.KeyCount]:
        return await reads.key_counts(self.pool, self.q, tasks, limit)

    async def rate_key_usage(
        self, rates: Mapping[str, RateLimit], limit: int = 100
    ) -> list[base.RateKeyUse]:
        return await reads.rate_key_usage(self.pool, self.q, rates, limit)

    # -- circuits ------------------------------------------------------------

    async def list_circuits(self) -> list[base.CircuitInfo]:
        return await admin.list_circuits(self.pool, self.q)

    async def reset_circuit(self, task: str) -> None:
        await admin.reset_circuit(self.pool, self.q, task)

    async def clear_circuit_failures(self, task: str | None) -> None:
        await admin.clear_circuit_failures(self.pool, self.q, task)
        self._listener.notify_all()

    # -- heartbeats ----------------------------------------------------------

    async def record_heartbeat(self, worker: base.WorkerInfo) -> None:
        await admin.record_heartbeat(self.pool, self.q, worker)

    async def list_workers(self) -> list[base.WorkerInfo]:
        return await admin.list_workers(self.pool, self.q)

    async def remove_worker(self, worker_id: str) -> None:
        await admin.remove_worker(self.pool, self.q, worker_id)

    async def prune_workers(self, older_than: float) -> int:
        return await admin.prune_workers(self.pool, self.q, older_than)

    # -- schedules -----------------------------------------------------------

    async def sync_schedules(
        self, specs: Sequence[base.ScheduleSpec], first_fires: Mapping[str, float | None]
    ) -> list[base.ScheduleRecord]:
        if not specs:
            return []
        return await schedules.sync_schedules(self.pool, self.q, specs, first_fires)

    async def list_schedules(self) -> list[base.ScheduleRecord]:
        return await schedules.list_schedules(self.pool, self.q)

    async def apply_schedule_change(self, change: ScheduleChange) -> base.ScheduleRecord | None:
        return await schedules.update_schedule(self.pool, self.q, change)

    async def advance_schedule(
        self, name: str, fired_at: float, next_fire_at: float | None, *, fired: bool = True
    ) -> bool:
        return await schedules.advance_schedule(
            self.pool, self.q, name, fired_at, next_fire_at, fired
        )

    async def delete_schedules(self, names: Sequence[str]) -> int:
        if not names:
            return 0
        return await schedules.delete_schedules(self.pool, self.q, names)

    # -- job statistics ------------------------------------------------------

    async def record_job_stats(self, stats: Sequence[base.JobStat]) -> None:
        await stats_sql.record_job_stats(self.pool, self.q, stats)

    async def job_stat_totals(self) -> list[base.JobStat]:
        return await stats_sql.job_stat_totals(self.pool, self.q)

    async def job_stat_series(self, since: float) -> list[base.JobStat]:
        return await stats_sql.job_stat_series(self.pool, self.q, since)

    async def prune_job_stats(self, older_than: float) -> int:
        return await stats_sql.prune_job_stats(self.pool, self.q, older_than)

"""The Redis backend: every state change is one Lua script on the server.

- Connections, error mapping and reconnection: connection.py (one redis-py
  asyncio client per backend, a cluster client when the URL says
  ``cluster=true``; scripts on connections of our own, direct.py). Every key of
  an app shares one hash tag (keys.py), so each script runs on one node,
  atomically.
- Times come from the server: scripts read ``TIME`` (G11).
- Each contract operation is one short method here that hands the connection
  to its area module: enqueue.py, claim.py (and ``wait_for_work``),
  handoff.py, settle.py, reads.py, admin.py, maintenance.py, schedules.py and
  stats.py. The scripts are ``scripts/*.lua`` (scripts.py runs them).

Layout, persistence and safety: docs/explanation/redis.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence

from conveyor.backends import base
from conveyor.backends.claims import ClaimKeeper
from conveyor.backends.redis import (
    admin,
    claim,
    enqueue,
    flow,
    maintenance,
    reads,
    schedules,
    settle,
)
from conveyor.backends.redis import stats as job_stats
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.handoff import Handoffs
from conveyor.backends.redis.keys import Keys
from conveyor.backends.redis.url import RedisOptions, parse_url
from conveyor.job import Job
from conveyor.ratelimit import RateLimit
from conveyor.settings import Settings


def _claimed(answer: tuple[base.SettleResult, base.ClaimResult]) -> base.ClaimResult:
    return answer[1]


class RedisBackend(base.Backend):
    """Jobs in Redis (standalone or cluster), shared by every process."""

    def __init__(self, url: str, settings: Settings | None = None) -> None:
        self.url = url
        self.settings = settings
        self.options: RedisOptions = parse_url(url)
        self.keys = Keys.for_prefix(self.options.prefix)
        self._conn = RedisConnection(self.options, self.keys, repr(self))
        self._handoffs = Handoffs(self._conn)
        self._claims = ClaimKeeper(self.settle_jobs, lambda: self._conn.client is not None)
        self._open_lock: asyncio.Lock | None = None

    def __repr__(self) -> str:
        return f"RedisBackend(prefix={self.options.prefix!r}, cluster={self.options.cluster})"

    # -- lifecycle ---------------------------------------------------------------
    async def open(self) -> None:
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self._conn.client is None:
                await self._conn.open()

    async def close(self) -> None:
        await self._claims.wait()  # claims in flight, and releases of orphaned ones
        await self._handoffs.close()
        await self._conn.close()

    async def now(self) -> float:
        client, _ = self._conn.ready()
        async with self._conn.errors("now"):
            seconds, micros = await client.time()
        return int(seconds) + int(micros) / 1_000_000

    async def ping(self) -> float:
        client, _ = self._conn.ready()
        started = time.perf_counter()
        async with self._conn.errors("ping"):
            await client.ping()
        return time.perf_counter() - started

    # -- enqueue, claim, handoff, settle -----------------------------------------
    async def enqueue_jobs(self, jobs: Sequence[base.NewJob]) -> list[Job]:
        return await enqueue.enqueue_jobs(self._conn, jobs)

    async def claim_jobs(self, request: base.ClaimRequest) -> base.ClaimResult:
        return await self._claims.run(claim.claim_jobs(self._conn, request))

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        await claim.wait_for_work(self._conn, queues, timeout, self._next_due)

    async def _next_due(self) -> float | None:
        # A method of its own so a test can overtake this read with an enqueue.
        return await claim.next_due(self._conn)

    hands_off = True

    async def next_handoff(self, worker_id: str, timeout: float) -> list[base.Handoff] | None:
        return await self._handoffs.next(worker_id, timeout)

    async def end_handoffs(self, worker_id: str, lease: float) -> base.ClaimResult:
        return await self._handoffs.end(worker_id, lease)

    async def renew_leases(
        self, worker_id: str, leases: Sequence[tuple[str, str]], lease: float
    ) -> base.RenewResult:
        return await settle.renew_leases(self._conn, leases, lease)

    async def settle_jobs(self, settlements: Sequence[base.Settlement]) -> base.SettleResult:
        return await settle.settle_jobs(self._conn, settlements)

    async def settle_and_claim(
        self, settlements: Sequence[base.Settlement], request: base.ClaimRequest
    ) -> tuple[base.SettleResult, base.ClaimResult]:
        if not settlements:
            return base.SettleResult(), await self.claim_jobs(request)
        return await self._claims.run_part(
            settle.settle_and_claim(self._conn, settlements, request), _claimed
        )

    async def save_progress(self, items: Sequence[tuple[str, str, bytes]]) -> set[str]:
        return await settle.save_progress(self._conn, items)

    async def cancel_requests(self, job_ids: Sequence[str]) -> set[str]:
        return await settle.cancel_requests(self._conn, job_ids)

    # -- reads ---------------------------------------------------------------------
    async def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        return await reads.get_jobs(self._conn, job_ids)

    async def list_jobs(
        self, where: base.JobFilter, limit: int = 100, offset: int = 0
    ) -> list[Job]:
        return await reads.list_jobs(self._conn, where, limit, offset)

    async def count_jobs(self, where: base.JobFilter) -> int:
        return await reads.count_jobs(self._conn, where)

    async def queue_counts(self) -> dict[str, dict[str, int]]:
        return await reads.queue_counts(self._conn)

    async def oldest_waiting(self) -> dict[str, float]:
        return await reads.oldest_waiting(self._conn)

    async def list_queues(self) -> list[base.QueueInfo]:
        return await reads.list_queues(self._conn)

    async def tenant_counts(self, queue: str, limit: int = 100) -> list[base.TenantCount]:
        return await reads.tenant_counts(self._conn, queue, limit)

    async def key_counts(self, tasks: Sequence[str], limit: int = 100) -> list[base.KeyCount]:
        return await flow.key_counts(self._conn, tasks, limit)

    async def rate_key_usage(
        self, rates: Mapping[str, RateLimit], limit: int = 100
    ) -> list[base.RateKeyUse]:
        return await flow.rate_key_usage(self._conn, rates, limit)

    # -- admin ---------------------------------------------------------------------
    async def cancel_job(self, job_id: str) -> Job | None:
        return await admin.cancel_job(self._conn, job_id)

    async def retry_failed(self, job_id: str, new_id: str) -> Job:
        return await admin.retry_failed(self._conn, job_id, new_id)

    async def delete_jobs(self, job_ids: Sequence[str]) -> int:
        return await admin.delete_jobs(self._conn, job_ids)

    async def purge_jobs(self, where: base.JobFilter) -> int:
        return await admin.purge_jobs(self._conn, where)

    async def configure_queue(self, info: base.QueueInfo) -> None:
        await admin.configure_queue(self._conn, info)

    async def set_queue_paused(self, name: str, paused: bool) -> None:
        await admin.set_queue_paused(self._conn, name, paused)

    async def list_circuits(self) -> list[base.CircuitInfo]:
        return await admin.list_circuits(self._conn)

    async def reset_circuit(self, task: str) -> None:
        await admin.reset_circuit(self._conn, task)

    async def clear_circuit_failures(self, task: str | None) -> None:
        await admin.clear_circuit_failures(self._conn, task)

    async def record_heartbeat(self, worker: base.WorkerInfo) -> None:
        await admin.record_heartbeat(self._conn, worker)

    async def list_workers(self) -> list[base.WorkerInfo]:
        return await admin.list_workers(self._conn)

    async def remove_worker(self, worker_id: str) -> None:
        await admin.remove_worker(self._conn, worker_id)

    async def prune_workers(self, older_than: float) -> int:
        return await admin.prune_workers(self._conn, older_than)

    # -- maintenance ---------------------------------------------------------------
    async def recover_stalled(self, max_stalled: int) -> base.StallResult:
        return await maintenance.recover_stalled(self._conn, max_stalled)

    async def prune_jobs(self, rules: Sequence[base.PruneRule]) -> int:
        return await maintenance.prune_jobs(self._conn, rules, self.now)

    # -- schedules -----------------------------------------------------------------
    async def sync_schedules(
        self, specs: Sequence[base.ScheduleSpec], first_fires: Mapping[str, float | None]
    ) -> list[base.ScheduleRecord]:
        return await schedules.sync_schedules(self._conn, specs, first_fires)

    async def list_schedules(self) -> list[base.ScheduleRecord]:
        return await schedules.list_schedules(self._conn)

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
        return await schedules.update_schedule(
            self._conn,
            name,
            paused=paused,
            cron=cron,
            every=every,
            next_fire_at=next_fire_at,
            reschedule=reschedule,
        )

    async def advance_schedule(
        self, name: str, fired_at: float, next_fire_at: float | None, *, fired: bool = True
    ) -> bool:
        return await schedules.advance_schedule(self._conn, name, fired_at, next_fire_at, fired)

    async def delete_schedules(self, names: Sequence[str]) -> int:
        return await schedules.delete_schedules(self._conn, names)

    # -- job statistics ------------------------------------------------------------
    async def record_job_stats(self, stats: Sequence[base.JobStat]) -> None:
        await job_stats.record_job_stats(self._conn, stats)

    async def job_stat_totals(self) -> list[base.JobStat]:
        return await job_stats.job_stat_totals(self._conn)

    async def job_stat_series(self, since: float) -> list[base.JobStat]:
        return await job_stats.job_stat_series(self._conn, since)

    async def prune_job_stats(self, older_than: float) -> int:
        return await job_stats.prune_job_stats(self._conn, older_than)

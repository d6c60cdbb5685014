"""The memory backend: a real backend whose store is a set of Python dicts.

``memory://`` gives a fresh private store; ``memory://NAME`` shares one store per
NAME within the process, so a producer app and a worker app in one test see the
same jobs. Nothing survives the process.

Each contract method runs one area function (enqueue, claim, settle, reads,
admin, maintenance, schedules, stats) on the store while holding its lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Concatenate, ParamSpec, TypeVar

from conveyor.backends.base import (
    Backend,
    CircuitInfo,
    ClaimRequest,
    ClaimResult,
    JobFilter,
    JobStat,
    KeyCount,
    NewJob,
    PruneRule,
    QueueInfo,
    RateKeyUse,
    RenewResult,
    ScheduleRecord,
    ScheduleSpec,
    Settlement,
    SettleResult,
    StallResult,
    TenantCount,
    WorkerInfo,
)
from conveyor.backends.memory import (
    admin,
    claim,
    enqueue,
    maintenance,
    reads,
    schedules,
    settle,
)
from conveyor.backends.memory import stats as job_stats
from conveyor.backends.memory.store import Store, store_for
from conveyor.errors import BackendUnavailable
from conveyor.job import Job
from conveyor.ratelimit import RateLimit
from conveyor.settings import Settings

_P = ParamSpec("_P")
_R = TypeVar("_R")


class MemoryBackend(Backend):
    """Jobs in dicts, for tests and single-process apps; passes the conformance suite."""

    def __init__(self, url: str = "memory://", settings: Settings | None = None) -> None:
        self.url = url
        self.settings = settings
        self._store = store_for(url)
        self._open = False

    def _ready(self) -> Store:
        if not self._open:
            raise BackendUnavailable(f"{self.url}: the backend is not open")
        return self._store

    def _locked(
        self,
        operation: Callable[Concatenate[Store, _P], _R],
        /,
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _R:
        """Run ``operation`` on the open store under its lock (it never awaits)."""
        store = self._ready()
        with store.lock:
            return operation(store, *args, **kwargs)

    # -- lifecycle ---------------------------------------------------------
    async def open(self) -> None:
        self._open = True

    async def close(self) -> None:
        self._open = False

    async def now(self) -> float:
        return self._locked(Store.now)

    async def ping(self) -> float:
        started = time.perf_counter()
        with self._ready().lock:
            pass
        return time.perf_counter() - started

    # -- jobs: the hot path ------------------------------------------------
    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        return self._locked(enqueue.enqueue_jobs, jobs)

    async def claim_jobs(self, request: ClaimRequest) -> ClaimResult:
        return self._locked(claim.claim_jobs, request)

    async def renew_leases(
        self, worker_id: str, leases: Sequence[tuple[str, str]], lease: float
    ) -> RenewResult:
        return self._locked(settle.renew_leases, leases, lease)

    async def settle_jobs(self, settlements: Sequence[Settlement]) -> SettleResult:
        return self._locked(settle.settle_jobs, settlements)

    async def save_progress(self, items: Sequence[tuple[str, str, bytes]]) -> set[str]:
        return self._locked(settle.save_progress, items)

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        # Takes the lock itself: it must let go of it while it waits.
        await claim.wait_for_work(self._ready(), queues, timeout)

    # -- jobs: reading and acting ------------------------------------------
    async def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        return self._locked(reads.get_jobs, job_ids)

    async def list_jobs(self, where: JobFilter, limit: int = 100, offset: int = 0) -> list[Job]:
        return self._locked(reads.list_jobs, where, limit, offset)

    async def count_jobs(self, where: JobFilter) -> int:
        return self._locked(reads.count_jobs, where)

    async def cancel_job(self, job_id: str) -> Job | None:
        return self._locked(admin.cancel_job, job_id)

    async def cancel_requests(self, job_ids: Sequence[str]) -> set[str]:
        return self._locked(settle.cancel_requests, job_ids)

    async def retry_failed(self, job_id: str, new_id: str) -> Job:
        return self._locked(admin.retry_failed, job_id, new_id)

    async def delete_jobs(self, job_ids: Sequence[str]) -> int:
        return self._locked(admin.delete_jobs, job_ids)

    async def purge_jobs(self, where: JobFilter) -> int:
        return self._locked(admin.purge_jobs, where)

    async def queue_counts(self) -> dict[str, dict[str, int]]:
        return self._locked(reads.queue_counts)

    async def oldest_waiting(self) -> dict[str, float]:
        return self._locked(reads.oldest_waiting)

    # -- maintenance -------------------------------------------------------
    async def recover_stalled(self, max_stalled: int) -> StallResult:
        return self._locked(maintenance.recover_stalled, max_stalled)

    async def prune_jobs(self, rules: Sequence[PruneRule]) -> int:
        return self._locked(maintenance.prune_jobs, rules)

    # -- queues ------------------------------------------------------------
    async def configure_queue(self, info: QueueInfo) -> None:
        self._locked(admin.configure_queue, info)

    async def set_queue_paused(self, name: str, paused: bool) -> None:
        self._locked(admin.set_queue_paused, name, paused)

    async def list_queues(self) -> list[QueueInfo]:
        return self._locked(reads.list_queues)

    async def tenant_counts(self, queue: str, limit: int = 100) -> list[TenantCount]:
        return self._locked(reads.tenant_counts, queue, limit)

    async def key_counts(self, tasks: Sequence[str], limit: int = 100) -> list[KeyCount]:
        return self._locked(reads.key_counts, list(tasks), limit)

    async def rate_key_usage(
        self, rates: Mapping[str, RateLimit], limit: int = 100
    ) -> list[RateKeyUse]:
        return self._locked(reads.rate_key_usage, dict(rates), limit)

    # -- circuits ----------------------------------------------------------
    async def list_circuits(self) -> list[CircuitInfo]:
        return self._locked(admin.list_circuits)

    async def reset_circuit(self, task: str) -> None:
        self._locked(admin.reset_circuit, task)

    async def clear_circuit_failures(self, task: str | None) -> None:
        self._locked(admin.clear_circuit_failures, task)

    # -- heartbeats --------------------------------------------------------
    async def record_heartbeat(self, worker: WorkerInfo) -> None:
        self._locked(admin.record_heartbeat, worker)

    async def list_workers(self) -> list[WorkerInfo]:
        return self._locked(admin.list_workers)

    async def remove_worker(self, worker_id: str) -> None:
        self._locked(admin.remove_worker, worker_id)

    async def prune_workers(self, older_than: float) -> int:
        return self._locked(admin.prune_workers, older_than)

    # -- schedules ---------------------------------------------------------
    async def sync_schedules(
        self, specs: Sequence[ScheduleSpec], first_fires: Mapping[str, float | None]
    ) -> list[ScheduleRecord]:
        return self._locked(schedules.sync_schedules, specs, first_fires)

    async def list_schedules(self) -> list[ScheduleRecord]:
        return self._locked(schedules.list_schedules)

    async def update_schedule(
        self,
        name: str,
        *,
        paused: bool | None = None,
        cron: str | None = None,
        every: float | None = None,
        next_fire_at: float | None = None,
        reschedule: bool = False,
    ) -> ScheduleRecord | None:
        return self._locked(
            schedules.update_schedule,
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
        return self._locked(schedules.advance_schedule, name, fired_at, next_fire_at, fired=fired)

    async def delete_schedules(self, names: Sequence[str]) -> int:
        return self._locked(schedules.delete_schedules, names)

    # -- job statistics ----------------------------------------------------
    async def record_job_stats(self, stats: Sequence[JobStat]) -> None:
        self._locked(job_stats.record_job_stats, stats)

    async def job_stat_totals(self) -> list[JobStat]:
        return self._locked(job_stats.job_stat_totals)

    async def job_stat_series(self, since: float) -> list[JobStat]:
        return self._locked(job_stats.job_stat_series, since)

    async def prune_job_stats(self, older_than: float) -> int:
        return self._locked(job_stats.prune_job_stats, older_than)

"""The PostgreSQL backend: many workers on many machines, one database.

The hot path is three server-side functions (migrations/0001_initial.sql),
one round trip each: ``enqueue`` (a whole batch), ``claim`` (promotion, TTL
expiry, circuits, rate limits and the claim itself, rows taken with
``FOR UPDATE SKIP LOCKED``) and ``settle`` (every outcome of a batch, then its
circuits). Everything else is one statement from queries.sql. Driver choice,
durability, maintenance on many machines: docs/explanation/postgres.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import asyncpg

from conveyor import serialization
from conveyor.backends import base
from conveyor.backends.claims import ClaimKeeper
from conveyor.backends.postgres.connection import DRIVER_ERRORS, Pool, raise_typed
from conveyor.backends.postgres.decode import claim_order, job_from_row
from conveyor.backends.postgres.migrate import MigrationReport, migrate
from conveyor.backends.postgres.notify import Listener
from conveyor.backends.postgres.queries import Queries, for_schema
from conveyor.backends.postgres.stats import StatsMixin
from conveyor.backends.postgres.transactional import run_enqueue_on
from conveyor.backends.postgres.url import PostgresOptions, parse_url
from conveyor.backends.rows import worker_blob, worker_from_blob
from conveyor.errors import BackendError, InvalidStateError, JobNotFound
from conveyor.ids import new_token
from conveyor.job import TERMINAL_STATES, Job, JobState
from conveyor.settings import Settings

logger = logging.getLogger("conveyor.backends.postgres")

#: Rows deleted per statement by purges and retention.
CHUNK = 5000
#: Added to a delayed job's due time, so the claim after the wait sees it as due.
DUE_SLACK = 0.002
#: After the listening connection failed to start, wait this long before trying again.
LISTEN_RETRY = 1.0

_CIRCUIT_STATES = {s.value: s for s in base.CircuitState}


class PostgresBackend(StatsMixin, base.Backend):
    """Jobs in a PostgreSQL schema, shared by every process that opens it."""

    def __init__(self, url: str, settings: Settings | None = None) -> None:
        self.url = url
        self.options: PostgresOptions = parse_url(url)
        self.q: Queries = for_schema(self.options.schema, self.options.channel)
        self.pool = Pool(self.options)
        self._listener = Listener(
            self.options.dsn, self.options.channel, self.options.connect_timeout
        )
        self._listening = False
        self._listen_failed_at = 0.0
        self._listen_start: asyncio.Future[None] | None = None
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

    async def close(self) -> None:
        await self._claims.wait()  # claims in flight, and releases of orphaned ones
        self._opened = False
        start, self._listen_start = self._listen_start, None
        if start is not None:
            await asyncio.gather(start, return_exceptions=True)
        self._listening = False
        await self._listener.shutdown()
        await self.pool.close()

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
        async with self.pool.acquire("enqueue") as conn:
            created = await run_enqueue_on(conn, self.q, jobs)
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
        return await self._claims.run(self._claim(request))

    async def _claim(self, request: base.ClaimRequest) -> base.ClaimResult:
        caps = request.task_limits
        rates = request.rate_limits
        args = (
            list(dict.fromkeys(request.queues)),
            request.limit,
            request.lease,
            request.worker_id,
            new_token(),
            list(caps) if caps else None,
            list(caps.values()) if caps else None,
            list(rates) if rates else None,
            [r.limit for r in rates.values()] if rates else None,
            [float(r.period) for r in rates.values()] if rates else None,
            request.circuit_tasks,
        )
        rows = await self.pool.fetch("claim", self.q.claim, *args)
        claimed: list[Job] = []
        expired: list[Job] = []
        for row in rows:
            job = job_from_row(row)
            (claimed if job.state is JobState.ACTIVE else expired).append(job)
        claimed.sort(key=claim_order)
        return base.ClaimResult(claimed, expired)

    async def renew_leases(
        self, worker_id: str, leases: Sequence[tuple[str, str]], lease: float
    ) -> base.RenewResult:
        if not leases:
            return base.RenewResult()
        rows = await self.pool.fetch(
            "renew",
            self.q.renew,
            [job_id for job_id, _ in leases],
            [token for _, token in leases],
            lease,
        )
        result = base.RenewResult()
        for job_id, cancel in rows:
            result.renewed.add(job_id)
            if cancel:
                result.cancel_requested.add(job_id)
        result.lost = {job_id for job_id, _ in leases} - result.renewed
        return result

    async def settle_jobs(self, settlements: Sequence[base.Settlement]) -> base.SettleResult:
        result = base.SettleResult()
        if not settlements:
            return result
        # A job settled twice in one batch: the first settlement wins, the
        # rest are refused (the job is no longer active under that token).
        seen: set[str] = set()
        batch: list[base.Settlement] = []
        for s in settlements:
            if s.job_id in seen:
                result.refused.add(s.job_id)
            else:
                seen.add(s.job_id)
                batch.append(s)
        if all(s.outcome is base.Outcome.COMPLETE for s in batch):
            rows = await self.pool.fetch(
                "settle",
                self.q.complete,
                [s.job_id for s in batch],
                [s.lease_token for s in batch],
                [s.result for s in batch],
                [s.progress for s in batch],
                sorted({s.task for s in batch if s.circuit is not None}),
            )
            for kind, name in rows:
                if kind == "refused":
                    result.refused.add(name)
                else:
                    result.circuit_changes.append(
                        base.CircuitInfo(name, base.CircuitState.CLOSED, 0, None)
                    )
            return result
        counted = any(s.circuit is not None for s in batch)
        rows = await self.pool.fetch(
            "settle",
            self.q.settle,
            [s.job_id for s in batch],
            [s.lease_token for s in batch],
            [s.outcome.value for s in batch],
            [s.result for s in batch],
            [s.failure_reason.value if s.failure_reason else None for s in batch],
            [_error_json(s) for s in batch],
            [float(s.retry_delay) for s in batch],
            [s.progress for s in batch],
            [s.task for s in batch] if counted else None,
            [s.circuit.threshold if s.circuit else None for s in batch] if counted else None,
            [s.circuit.open_for if s.circuit else None for s in batch] if counted else None,
        )
        wake: set[str] = set()
        for kind, name, state, failures, open_until in rows:
            if kind == "refused":
                result.refused.add(name)
            elif kind == "cancelled":
                result.cancelled.add(name)
            elif kind == "wake":
                wake.add(name)
            elif kind == "circuit":
                result.circuit_changes.append(
                    base.CircuitInfo(name, _CIRCUIT_STATES[state], failures, open_until)
                )
        self._listener.notify(wake)
        return result

    async def save_progress(self, items: Sequence[tuple[str, str, bytes]]) -> set[str]:
        if not items:
            return set()
        rows = await self.pool.fetch(
            "save progress",
            self.q.save_progress,
            [i[0] for i in items],
            [i[1] for i in items],
            [i[2] for i in items],
        )
        return {i[0] for i in items} - {row[0] for row in rows}

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        wanted = frozenset(queues)
        if self._listener.take_pending(wanted):
            return
        future = self._listener.add(wanted)
        try:
            was_listening = self._listening
            await self._ensure_listening()
            # A NOTIFY sent before LISTEN reached nobody: look for its work.
            if not was_listening and self._listening and await self._has_waiting(wanted):
                return
            if wanted and timeout > 0 and not future.done():
                try:
                    due = await self.pool.fetchval("next due", self.q.next_due, sorted(wanted))
                except BackendError:
                    due = None  # the next claim reports the outage
                if due is not None:
                    timeout = min(timeout, due - time.time() + DUE_SLACK)
            if timeout > 0 and not future.done():
                await asyncio.wait([future], timeout=timeout)
        finally:
            self._listener.remove(future)

    async def _has_waiting(self, queues: frozenset[str]) -> bool:
        try:
            return bool(await self.pool.fetchval("has waiting", self.q.has_waiting, sorted(queues)))
        except BackendError:
            return False  # the next claim reports the outage

    async def _ensure_listening(self) -> None:
        """LISTEN from the first wait on (producers never open the extra connection)."""
        if self._listening or not self._opened:
            return
        if time.monotonic() - self._listen_failed_at < LISTEN_RETRY:
            return
        if self._listen_start is None or self._listen_start.done():
            # One start for every concurrent waiter.
            self._listen_start = asyncio.ensure_future(self._start_listening())
        await asyncio.shield(self._listen_start)

    async def _start_listening(self) -> None:
        try:
            await self._listener.start()
            self._listening = True
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            self._listen_failed_at = time.monotonic()
            logger.warning("cannot LISTEN for new work (polling instead): %r", exc)

    # -- jobs: reading and acting --------------------------------------------

    async def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        if not job_ids:
            return []
        rows = await self.pool.fetch("get jobs", self.q.jobs_by_ids, list(job_ids))
        return [job_from_row(r) for r in rows]

    async def list_jobs(
        self, where: base.JobFilter, limit: int = 100, offset: int = 0
    ) -> list[Job]:
        rows = await self.pool.fetch("list jobs", self.q.list_jobs, *_filter(where), limit, offset)
        return [job_from_row(r) for r in rows]

    async def count_jobs(self, where: base.JobFilter) -> int:
        if where.only_states():
            total = 0
            for state in {JobState(s) for s in where.states or ()}:
                total += int(await self.pool.fetchval("count", self.q.count_state, state.value))
            return total
        return int(await self.pool.fetchval("count", self.q.count_jobs, *_filter(where)))

    async def cancel_job(self, job_id: str) -> Job | None:
        rows = await self.pool.fetch("cancel", self.q.cancel_job, job_id)
        if rows:
            return job_from_row(rows[0])
        return await self.get_job(job_id)

    async def cancel_requests(self, job_ids: Sequence[str]) -> set[str]:
        if not job_ids:
            return set()
        rows = await self.pool.fetch("cancel requests", self.q.cancel_requested_of, list(job_ids))
        return {r[0] for r in rows}

    async def retry_failed(self, job_id: str, new_id: str) -> Job:
        async with self.pool.acquire("retry") as conn, conn.transaction():
            target = await conn.fetchrow(self.q.retry_target_for_update, job_id)
            if target is None:
                raise JobNotFound(job_id)
            state, retried_as = target
            if state != JobState.FAILED.value:
                raise InvalidStateError(f"job {job_id} is {state}: only failed jobs can be retried")
            if retried_as is not None:
                rows = await conn.fetch(self.q.jobs_by_ids, [retried_as])
                return base.earlier_retry(job_id, retried_as, [job_from_row(r) for r in rows])
            queue = await conn.fetchval(self.q.insert_retry_copy, job_id, new_id)
            await conn.execute(self.q.mark_retried, job_id, new_id)
            await conn.execute(self.q.notify, [queue])
            rows = await conn.fetch(self.q.jobs_by_ids, [new_id])
        job = job_from_row(rows[0])
        self._listener.notify([job.queue])
        return job

    async def delete_jobs(self, job_ids: Sequence[str]) -> int:
        if not job_ids:
            return 0
        return int(await self.pool.fetchval("delete", self.q.delete_jobs, list(job_ids)))

    async def purge_jobs(self, where: base.JobFilter) -> int:
        total = 0
        while True:  # chunked: each statement holds its row locks briefly
            deleted = int(
                await self.pool.fetchval("purge", self.q.purge_chunk, *_filter(where), CHUNK)
            )
            total += deleted
            if deleted < CHUNK:
                return total

    async def queue_counts(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}

        def zeros() -> dict[str, int]:
            return {s.value: 0 for s in JobState}

        async with self.pool.acquire("queue counts") as conn:
            for name, *_ in await conn.fetch(self.q.queue_rows):
                counts[name] = zeros()
            for queue, state, n in await conn.fetch(self.q.counts_by_queue):
                counts.setdefault(queue, zeros())[state] = int(n)
        return dict(sorted(counts.items()))

    async def oldest_waiting(self) -> dict[str, float]:
        rows = await self.pool.fetch("oldest waiting", self.q.oldest_waiting)
        return {queue: run_at for queue, run_at in rows}

    # -- maintenance ---------------------------------------------------------

    async def recover_stalled(self, max_stalled: int) -> base.StallResult:
        rows = await self.pool.fetch("recover stalled", self.q.recover_stalled, max_stalled)
        result = base.StallResult()
        for row in rows:
            job = job_from_row(row)
            if job.state is JobState.WAITING:
                result.requeued.append(job)
            elif job.state is JobState.CANCELLED:
                result.cancelled.append(job)
            else:
                result.failed.append(job)
        if result.requeued:
            queues = sorted({job.queue for job in result.requeued})
            await self.pool.execute("notify", self.q.notify, queues)
        return result

    async def prune_jobs(self, rules: Sequence[base.PruneRule]) -> int:
        total = 0
        for rule in rules:
            if rule.state not in TERMINAL_STATES:
                continue  # retention never touches live jobs
            exclude = list(rule.exclude_tasks)
            for query, bound in (
                (self.q.prune_by_age, rule.max_age),
                (self.q.prune_by_count, rule.max_count),
            ):
                if bound is None:
                    continue
                limit: float | int = max(0, bound) if query is self.q.prune_by_count else bound
                while True:  # chunked, until the rule has nothing left to delete
                    deleted = int(
                        await self.pool.fetchval(
                            "prune", query, rule.state.value, limit, rule.task, exclude, CHUNK
                        )
                    )
                    total += deleted
                    if not deleted:
                        break
        await self.pool.execute("prune keys", self.q.prune_keys)
        await self.pool.execute("prune rate starts", self.q.prune_rate_starts)
        return total

    # -- queues --------------------------------------------------------------

    async def configure_queue(self, name: str, max_size: int | None, ttl: float | None) -> None:
        await self.pool.execute("configure queue", self.q.configure_queue, name, max_size, ttl)

    async def set_queue_paused(self, name: str, paused: bool) -> None:
        async with self.pool.acquire("pause queue") as conn, conn.transaction():
            await conn.execute(self.q.set_queue_paused, name, paused)
            if not paused:
                await conn.execute(self.q.notify, [name])
        if not paused:
            self._listener.notify([name])

    async def list_queues(self) -> list[base.QueueInfo]:
        async with self.pool.acquire("list queues") as conn:
            queues = {
                name: base.QueueInfo(name=name, paused=paused, max_size=max_size, ttl=ttl)
                for name, paused, max_size, ttl in await conn.fetch(self.q.queue_rows)
            }
            for (queue,) in await conn.fetch(self.q.queue_names_with_jobs):
                if queue not in queues:
                    queues[queue] = base.QueueInfo(name=queue)
        return sorted(queues.values(), key=lambda q: q.name)

    # -- circuits ------------------------------------------------------------

    async def list_circuits(self) -> list[base.CircuitInfo]:
        rows = await self.pool.fetch("list circuits", self.q.list_circuits)
        return [
            base.CircuitInfo(
                task, _CIRCUIT_STATES.get(state, base.CircuitState.OPEN), failures, open_until
            )
            for task, state, failures, open_until in rows
        ]

    async def reset_circuit(self, task: str) -> None:
        await self.pool.execute("reset circuit", self.q.reset_circuit, task)
        self._listener.notify_all()

    # -- heartbeats ----------------------------------------------------------

    async def record_heartbeat(self, worker: base.WorkerInfo) -> None:
        await self.pool.execute(
            "heartbeat",
            self.q.record_heartbeat,
            worker.id,
            worker_blob(worker),
            float(worker.heartbeat_interval),
        )

    async def list_workers(self) -> list[base.WorkerInfo]:
        rows = await self.pool.fetch("list workers", self.q.list_workers)
        return [worker_from_blob(*row) for row in rows]

    async def remove_worker(self, worker_id: str) -> None:
        await self.pool.execute("remove worker", self.q.remove_worker, worker_id)

    async def prune_workers(self, older_than: float) -> int:
        return int(await self.pool.fetchval("prune workers", self.q.prune_workers, older_than))


def _error_json(s: base.Settlement) -> str | None:
    if s.error is None or s.outcome is base.Outcome.COMPLETE:
        return None
    return serialization.dumps_str(s.error.to_dict())


def _filter(where: base.JobFilter) -> tuple[Any, ...]:
    """The seven JobFilter parameters of list_jobs/count_jobs/purge_chunk."""
    return (
        None if where.states is None else [JobState(s).value for s in where.states],
        where.queue,
        where.task,
        where.tenant,
        None if where.failure_reason is None else where.failure_reason.value,
        where.idempotency_key,
        where.finished_before,
    )

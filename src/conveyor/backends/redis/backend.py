"""The Redis backend: every state change is one Lua script on the server.

- Connections, error mapping and reconnection: connection.py (one redis-py
  asyncio client per backend, a cluster client when the URL says
  ``cluster=true``; scripts on connections of our own, direct.py). Every key of
  an app shares one hash tag (keys.py), so each script runs on one node,
  atomically.
- Times come from the server: scripts read ``TIME`` (G11).
- ``wait_for_work`` listens on the app's pub/sub channel (wakeup.py).

Layout, persistence and safety: docs/explanation/redis.md.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgpack
from redis.exceptions import ResponseError

from conveyor import serialization
from conveyor.backends import base
from conveyor.backends.base import DURATION_BUCKETS
from conveyor.backends.claims import ClaimKeeper
from conveyor.backends.redis import decode, records
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.direct import DirectConnections
from conveyor.backends.redis.keys import Keys
from conveyor.backends.redis.url import RedisOptions, parse_url
from conveyor.backends.rows import worker_from_blob
from conveyor.errors import (
    BackendError,
    BackendUnavailable,
    InvalidStateError,
    JobNotFound,
    NotReplicated,
    QueueFull,
)
from conveyor.ids import new_token
from conveyor.job import Job, JobState
from conveyor.settings import Settings

logger = logging.getLogger("conveyor.backends.redis")

#: Added to a delayed job's due time so the claim after the wait sees it as due.
DUE_SLACK = 0.002
#: At most this many jobs deleted per retention rule in one call (keeps each
#: script short; the cleaner runs again soon).
PRUNE_CAP = 20_000

#: From this many jobs, enqueue_jobs builds the Job objects while the script runs.
_OVERLAP_FROM = 16


def _retrieve(call: asyncio.Future[Any]) -> None:
    """Consume the outcome of a call whose caller went away (no "never retrieved")."""
    if not call.cancelled():
        call.exception()


_COMPLETE = base.Outcome.COMPLETE


def _opt(value: Any) -> Any:
    return "" if value is None else value


def _float_text(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _enqueue_options(new: base.NewJob) -> bytes:
    """The enqueue script's last argument for ``new``: empty when every option
    it holds has its default (most jobs), else those options, MessagePack."""
    if (
        new.priority == 0
        and new.delay == 0
        and new.run_at is None
        and new.ttl is None
        and new.idempotency_key is None
        and new.tenant is None
        and new.metadata is None
        and new.retry_of is None
    ):
        return b""
    packed: bytes = msgpack.packb(
        [
            new.priority,
            new.delay,
            None if new.run_at is None else float(new.run_at),
            None if new.ttl is None else float(new.ttl),
            new.idempotency_key,
            float(new.idempotency_ttl),
            new.tenant,
            new.metadata,
            new.retry_of,
        ],
        use_bin_type=False,  # the server's cmsgpack reads no bin type: bytes go as str
    )
    return packed


class RedisBackend(base.Backend):
    """Jobs in Redis (standalone or cluster), shared by every process."""

    def __init__(self, url: str, settings: Settings | None = None) -> None:
        self.url = url
        self.settings = settings
        self.options: RedisOptions = parse_url(url)
        self.keys = Keys.for_prefix(self.options.prefix)
        self._conn = RedisConnection(self.options, self.keys, repr(self))
        #: Per worker: the connection that pops its inbox (next_handoff); the
        #: workers this backend ended (end_handoffs), and those whose end
        #: marker came.
        self._inboxes: dict[str, DirectConnections] = {}
        self._inboxes_ending: set[str] = set()
        self._inboxes_ended: set[str] = set()
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
        inboxes, self._inboxes = self._inboxes, {}
        for inbox in inboxes.values():
            await inbox.close()
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

    # -- enqueue -------------------------------------------------------------------
    async def enqueue_jobs(self, jobs: Sequence[base.NewJob]) -> list[Job]:
        if not jobs:
            self._conn.ready()
            return []
        argv: list[Any] = [len(jobs)]
        extend = argv.extend
        for new in jobs:
            extend(
                (
                    new.id,
                    new.task,
                    new.queue,
                    new.payload,
                    new.max_attempts,
                    _opt(new.timeout),
                    _enqueue_options(new),
                )
            )
        k = self.keys
        keys = [k.all, k.delayed, k.expiring, k.queues, k.wake]
        if len(jobs) < _OVERLAP_FROM:
            # A few jobs: sent at once, built after (a task to overlap them costs more).
            reply = await self._enqueue_call(keys, argv)
            built = [self._new_job(new) for new in jobs]
        else:
            call = asyncio.ensure_future(self._enqueue_call(keys, argv))
            try:
                # Build the Job objects while the server runs the script: only the
                # server's clock is missing from most of them.
                await asyncio.sleep(0)
                built = [self._new_job(new) for new in jobs]
                reply = await asyncio.shield(call)
            except asyncio.CancelledError:
                call.add_done_callback(_retrieve)
                raise
        tag = reply[0]
        if tag == b"full":
            raise QueueFull(reply[1].decode(), int(reply[2]))
        if tag == b"exists":
            raise BackendError(f"a job with id {reply[1].decode()!r} already exists")
        now = float(reply[1])
        out = []
        for job, item in zip(built, reply[2:], strict=True):
            if item == b"n":  # waiting, due now, no TTL
                job.run_at = job.created_at = now
            elif item[0] == b"n":
                _, state, run_at, ttl, expires_at = item
                job.state = JobState.WAITING if state == b"waiting" else JobState.DELAYED
                job.run_at = float(run_at)
                job.created_at = now
                job.ttl = float(ttl) if ttl else None
                job.expires_at = float(expires_at) if expires_at else None
            else:
                job = self._duplicate(item)
            out.append(job)
        return out

    async def _enqueue_call(self, keys: list[str], argv: list[Any]) -> Any:
        replicas = self.options.wait_replicas
        if not replicas:
            return await self._conn.run("enqueue", keys, argv)
        client, runner = self._conn.ready()
        sha, rest = runner.args("enqueue", keys, argv)
        timeout_ms = max(1, math.ceil(self.options.wait_timeout * 1000))
        async with self._conn.errors("enqueue"):
            # One pipeline = one connection: WAIT counts the writes made on it.
            for attempt in (1, 2):
                pipe = client.pipeline(transaction=False)
                pipe.evalsha(sha, *rest)
                pipe.execute_command("WAIT", replicas, timeout_ms)
                reply, acked = await pipe.execute(raise_on_error=False)
                if isinstance(reply, ResponseError) and "NOSCRIPT" in str(reply) and attempt == 1:
                    await runner.load_all()
                    continue
                break
            if isinstance(reply, Exception):
                raise reply
            if isinstance(acked, Exception):
                raise acked
        if reply[0] == b"ok" and int(acked) < replicas:
            raise NotReplicated(
                f"redis: the enqueue reached {int(acked)} of {replicas} replica(s) within "
                f"{self.options.wait_timeout:g}s; the jobs are on the primary but could be "
                "lost if it fails now",
                acknowledged=int(acked),
                required=replicas,
            )
        return reply

    @staticmethod
    def _duplicate(item: Any) -> Job:
        """The job a live idempotency key points at (``d``), or what the key
        remembers of a job retention deleted (``g``)."""
        if item[0] == b"d":
            return decode.job_from_hash(item[1], duplicate=True)
        state = item[4].decode() or JobState.COMPLETED.value
        return Job(
            id=item[1].decode(),
            task=item[2].decode(),
            queue=item[3].decode(),
            state=JobState(state),
            idempotency_key=item[5].decode(),
            duplicate=True,
        )

    @staticmethod
    def _new_job(new: base.NewJob) -> Job:
        """A waiting Job for ``new``; the caller fills in the server's times."""
        try:
            payload = serialization.loads(new.payload)
            problem = None
        except ValueError as exc:
            payload, problem = None, f"stored payload is not valid JSON: {exc}"
        metadata: dict[str, Any] = {}
        if new.metadata is not None:
            try:
                loaded = serialization.loads(new.metadata)
                metadata = loaded if isinstance(loaded, dict) else {}
            except ValueError as exc:
                problem = problem or f"stored metadata is not valid JSON: {exc}"
        return Job(
            id=new.id,
            task=new.task,
            queue=new.queue,
            payload=payload,
            state=JobState.WAITING,
            priority=new.priority,
            max_attempts=new.max_attempts,
            timeout=new.timeout,
            idempotency_key=new.idempotency_key,
            tenant=new.tenant,
            metadata=metadata,
            retry_of=new.retry_of,
            decode_error=problem,
        )

    # -- claim, leases, settlements ---------------------------------------------
    async def claim_jobs(self, request: base.ClaimRequest) -> base.ClaimResult:
        return await self._claims.run(self._claim(request))

    async def _claim(self, request: base.ClaimRequest) -> base.ClaimResult:
        queues = list(dict.fromkeys(request.queues))
        argv: list[Any] = [
            request.worker_id,
            request.limit,
            request.lease,
            new_token(),
            1 if request.circuit_tasks else 0,
            request.handoff_for,
            len(queues),
            *queues,
            len(request.task_limits),
        ]
        for task, cap in request.task_limits.items():
            argv += (task, cap)
        argv.append(len(request.rate_limits))
        for task, rate in request.rate_limits.items():
            argv += (task, rate.limit, rate.period)
        k = self.keys
        keys = [k.delayed, k.expiring, k.active, k.done("failed")]
        return decode.claim_result(await self._conn.run("claim", keys, argv))

    # -- direct handoff ------------------------------------------------------------
    hands_off = True

    async def next_handoff(self, worker_id: str, timeout: float) -> list[base.Handoff] | None:
        self._conn.ready()
        if worker_id in self._inboxes_ended:
            await self._close_inbox(worker_id)
            return None
        inbox = self._inboxes.get(worker_id)
        if inbox is None:
            inbox = self._inboxes[worker_id] = self._conn.make_direct(self._conn.slot_url())
        key = self.keys.inbox(worker_id)
        try:
            async with self._conn.errors("handoff", blocking=timeout):
                # The server's clock before the pop, read in the same trip: a
                # lease that started `at` began no earlier, locally, than
                # sent + (at - before), the way a claim's lease counts from
                # when the claim was sent.
                sent = time.monotonic()
                (seconds, micros), popped = await inbox.pipeline(
                    [("TIME",), ("BLMPOP", timeout, 1, key, "LEFT", "COUNT", 10_000)]
                )
        except BaseException:
            # A new connection next time (on a cluster: to the slot's node now).
            await self._drop_inbox(worker_id)
            raise
        if popped is None:
            return []
        before = int(seconds) + int(micros) / 1_000_000
        handed: list[base.Handoff] = []
        for packed in popped[1]:
            if not packed:
                if worker_id in self._inboxes_ending:
                    # end_handoffs: what came before it is still delivered.
                    self._inboxes_ended.add(worker_id)
                    break
                continue  # an earlier process's, with the same worker id
            try:
                at, groups, expired = msgpack.unpackb(packed, raw=True)
                result = decode.leased_result(groups, expired)
            except (ValueError, TypeError) as exc:
                # Not this version's format (another build on the same prefix):
                # its jobs stay active under their lease until stall recovery.
                logger.warning("skipped a handoff this worker cannot read: %r", exc)
                continue
            handed.append(base.Handoff(result, sent + (float(at) - before)))
        if not handed and worker_id in self._inboxes_ended:
            await self._close_inbox(worker_id)
            return None
        return handed

    async def _close_inbox(self, worker_id: str) -> None:
        self._inboxes_ended.discard(worker_id)
        self._inboxes_ending.discard(worker_id)
        await self._drop_inbox(worker_id)

    async def _drop_inbox(self, worker_id: str) -> None:
        inbox = self._inboxes.pop(worker_id, None)
        if inbox is not None:
            await inbox.close()

    async def end_handoffs(self, worker_id: str, lease: float) -> base.ClaimResult:
        self._inboxes_ending.add(worker_id)
        packed = await self._conn.run("handoff-end", [self.keys.active], [worker_id, lease])
        return decode.claim_result(packed)

    async def renew_leases(
        self, worker_id: str, leases: Sequence[tuple[str, str]], lease: float
    ) -> base.RenewResult:
        if not leases:
            self._conn.ready()
            return base.RenewResult()
        argv: list[Any] = [lease]
        for job_id, token in leases:
            argv += (job_id, token)
        renewed, lost, cancel = await self._conn.run("renew", [self.keys.active], argv)
        return base.RenewResult(
            set(decode.text_list(renewed)),
            set(decode.text_list(lost)),
            set(decode.text_list(cancel)),
        )

    async def settle_jobs(self, settlements: Sequence[base.Settlement]) -> base.SettleResult:
        if not settlements:
            self._conn.ready()
            return base.SettleResult()
        argv: list[Any] = [len(settlements)]
        extend = argv.extend
        for s in settlements:
            if s.outcome is _COMPLETE and s.result is None and s.progress is None:
                # Most runs: three arguments instead of eleven (settle-5.lua).
                extend((s.job_id, s.lease_token, "c" if s.circuit is None else "c+"))
                continue
            error = serialization.dumps(s.error.to_dict()) if s.error is not None else ""
            extend(
                (
                    s.job_id,
                    s.lease_token,
                    s.outcome.value,
                    s.task,
                    _opt(s.result),
                    error,
                    s.failure_reason.value if s.failure_reason is not None else "",
                    s.retry_delay,
                    s.circuit.threshold if s.circuit is not None else "",
                    s.circuit.open_for if s.circuit is not None else 0,
                    _opt(s.progress),
                )
            )
        k = self.keys
        keys = [k.active, k.delayed, k.circuits, k.expiring, k.wake]
        refused, cancelled, changes = await self._conn.run("settle", keys, argv)
        return base.SettleResult(
            refused=set(decode.text_list(refused)),
            cancelled=set(decode.text_list(cancelled)),
            circuit_changes=[
                base.CircuitInfo(
                    task=c[0].decode(),
                    state=base.CircuitState(c[1].decode()),
                    failures=int(c[2]),
                    open_until=float(c[3]) if c[3] else None,
                )
                for c in changes
            ],
        )

    async def save_progress(self, items: Sequence[tuple[str, str, bytes]]) -> set[str]:
        if not items:
            self._conn.ready()
            return set()
        argv: list[Any] = []
        for job_id, token, progress in items:
            argv += (job_id, token, progress)
        refused = await self._conn.run("progress", [self.keys.active], argv)
        return set(decode.text_list(refused))

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        self._conn.ready()
        wake = self._conn.wake
        if wake is None or timeout <= 0:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        listening = frozenset(queues)
        was_live = wake.live
        wake.start()
        await wake.ready(min(timeout, 0.5))
        # Counted from here, so a resubscribe's "a:" during the look below counts.
        broadcasts = wake.broadcasts
        # Work that came before the subscription was live notified nobody: look
        # for it now that none can slip past. (Still down: the subscribe's own
        # "a:" wake-up covers that gap when it comes up.)
        if not was_live and wake.live and await self._has_waiting(listening):
            return
        while True:
            if wake.take_pending(listening):
                return
            timers = wake.timers  # a timer set during the read below makes us read again
            try:
                due = await self._next_due()
            except BackendUnavailable:
                due = None
            # No await from here to wake.add(): a notification that came while
            # we read the next due time is seen now, and none can slip past.
            if wake.take_pending(listening) or wake.broadcasts != broadcasts:
                return
            if wake.timers != timers:
                continue  # a new timer: read the next due time again
            remaining = deadline - loop.time()
            if due is not None:
                remaining = min(remaining, due + DUE_SLACK)
            if remaining <= 0:
                return
            future = wake.add(listening)
            try:
                done, _ = await asyncio.wait({future}, timeout=remaining)
            finally:
                wake.remove(future)
            if not done or future.result():
                return
            # A timer-only wake: a delayed job may now be due sooner; look again.

    async def _has_waiting(self, queues: frozenset[str]) -> bool:
        """Whether any of ``queues`` has waiting jobs (False when Redis is down:
        the wait then times out, and the next claim reports the outage)."""
        if not queues:
            return False
        client, _ = self._conn.ready()
        try:
            async with self._conn.errors("wait_for_work"):
                found = await client.exists(*(self.keys.waiting_tasks(q) for q in queues))
        except BackendUnavailable:
            return False
        return bool(found)

    async def _next_due(self) -> float | None:
        """Seconds until the next delayed job is due (server clock), or None."""
        due = await self._conn.run("next-due", [self.keys.delayed], [])
        return float(due) if due is not None else None

    # -- reads ---------------------------------------------------------------------
    async def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        client, _ = self._conn.ready()
        ids = list(dict.fromkeys(job_ids))
        if not ids:
            return []
        async with self._conn.errors("get_jobs"):
            pipe = client.pipeline(transaction=False)
            for job_id in ids:
                pipe.hgetall(self.keys.job(job_id))
                pipe.get(self.keys.payload(job_id))
            replies = await pipe.execute()
        out: list[Job] = []
        for i, job_id in enumerate(ids):
            row, payload = replies[2 * i], replies[2 * i + 1]
            if row:
                flat: list[Any] = [b"id", job_id.encode(), b"p", payload]
                for field, value in row.items():
                    flat += (field, value)
                out.append(decode.job_from_hash(flat))
        return out

    def _filter_args(self, where: base.JobFilter) -> list[Any]:
        states = "" if where.states is None else ",".join(s.value for s in where.states)
        if where.states is not None and not where.states:
            states = ","  # an empty list matches nothing
        return [
            states,
            _opt(where.queue),
            _opt(where.task),
            _opt(where.tenant),
            where.failure_reason.value if where.failure_reason is not None else "",
            _opt(where.idempotency_key),
            _float_text(where.finished_before),
        ]

    async def list_jobs(
        self, where: base.JobFilter, limit: int = 100, offset: int = 0
    ) -> list[Job]:
        k = self.keys
        argv = ["list", max(0, offset), max(0, limit), *self._filter_args(where)]
        rows = await self._conn.run("select", [k.all, k.queues], argv)
        return decode.jobs_from_hashes(rows)

    async def count_jobs(self, where: base.JobFilter) -> int:
        k = self.keys
        argv = ["count", 0, 0, *self._filter_args(where)]
        return int(await self._conn.run("select", [k.all, k.queues], argv))

    async def cancel_job(self, job_id: str) -> Job | None:
        k = self.keys
        row = await self._conn.run("cancel", [k.delayed, k.expiring], [job_id])
        return decode.job_from_hash(row) if row else None

    async def cancel_requests(self, job_ids: Sequence[str]) -> set[str]:
        client, _ = self._conn.ready()
        ids = list(dict.fromkeys(job_ids))
        if not ids:
            return set()
        async with self._conn.errors("cancel_requests"):
            pipe = client.pipeline(transaction=False)
            for job_id in ids:
                pipe.hmget(self.keys.job(job_id), "s", "cr")
            rows = await pipe.execute()
        return {
            job_id
            for job_id, (state, flag) in zip(ids, rows, strict=True)
            if state == b"active" and flag == b"1"
        }

    async def retry_failed(self, job_id: str, new_id: str) -> Job:
        k = self.keys
        reply = await self._conn.run("retry", [k.all, k.expiring, k.wake], [job_id, new_id])
        tag = reply[0]
        if tag == b"missing":
            raise JobNotFound(job_id)
        if tag == b"state":
            raise InvalidStateError(f"job {job_id} is {reply[1].decode()}, not failed")
        if tag == b"exists":
            raise BackendError(f"a job with id {new_id!r} already exists")
        if tag == b"earlier":
            found = [decode.job_from_hash(reply[2])] if reply[2] else []
            return base.earlier_retry(job_id, reply[1].decode(), found)
        return decode.job_from_hash(reply[1])

    async def delete_jobs(self, job_ids: Sequence[str]) -> int:
        if not job_ids:
            self._conn.ready()
            return 0
        return int(await self._conn.run("delete", [self.keys.all], list(job_ids)))

    async def purge_jobs(self, where: base.JobFilter) -> int:
        k = self.keys
        argv = ["purge", 0, 0, *self._filter_args(where)]
        return int(await self._conn.run("select", [k.all, k.queues], argv))

    async def _queue_rows(self) -> list[Any]:
        rows: list[Any] = await self._conn.run("queues", [self.keys.queues], [])
        return rows

    async def queue_counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for name, configured, _, _, _, counts, _ in await self._queue_rows():
            by_state = {state.value: 0 for state in JobState}
            for field, value in decode.as_dict(counts).items():
                by_state[field.decode()] = int(value)
            if configured or any(by_state.values()):
                out[name.decode()] = by_state
        return dict(sorted(out.items()))

    async def oldest_waiting(self) -> dict[str, float]:
        return {row[0].decode(): float(row[6]) for row in await self._queue_rows() if row[6]}

    # -- maintenance ---------------------------------------------------------------
    async def recover_stalled(self, max_stalled: int) -> base.StallResult:
        k = self.keys
        requeued, failed, cancelled = await self._conn.run(
            "recover", [k.active, k.expiring, k.wake], [max_stalled]
        )
        return base.StallResult(
            decode.jobs_from_hashes(requeued),
            decode.jobs_from_hashes(failed),
            decode.jobs_from_hashes(cancelled),
        )

    async def prune_jobs(self, rules: Sequence[base.PruneRule]) -> int:
        argv: list[Any] = [PRUNE_CAP, len(rules)]
        for rule in rules:
            argv += (
                rule.state.value,
                _float_text(rule.max_age),
                _opt(rule.max_count),
                _opt(rule.task),
                len(rule.exclude_tasks),
                *rule.exclude_tasks,
            )
        return int(await self._conn.run("prune", [self.keys.all], argv))

    # -- queues --------------------------------------------------------------------
    async def configure_queue(self, name: str, max_size: int | None, ttl: float | None) -> None:
        k = self.keys
        await self._conn.run(
            "configure", [k.queues, k.wake], [name, _opt(max_size), _float_text(ttl)]
        )

    async def set_queue_paused(self, name: str, paused: bool) -> None:
        k = self.keys
        await self._conn.run("pause", [k.queues, k.wake], [name, 1 if paused else 0])

    async def list_queues(self) -> list[base.QueueInfo]:
        out: list[base.QueueInfo] = []
        for name, configured, paused, max_size, ttl, counts, _ in await self._queue_rows():
            has_jobs = any(int(v) for v in decode.as_dict(counts).values())
            if not (configured or has_jobs):
                continue
            out.append(
                base.QueueInfo(
                    name=name.decode(),
                    paused=paused == b"1",
                    max_size=int(max_size) if max_size else None,
                    ttl=float(ttl) if ttl else None,
                )
            )
        return sorted(out, key=lambda q: q.name)

    # -- circuits ------------------------------------------------------------------
    async def list_circuits(self) -> list[base.CircuitInfo]:
        client, _ = self._conn.ready()
        async with self._conn.errors("list_circuits"):
            tasks = sorted(m.decode() for m in await client.smembers(self.keys.circuits))
            pipe = client.pipeline(transaction=False)
            for task in tasks:
                pipe.hgetall(self.keys.circuit(task))
            rows = await pipe.execute() if tasks else []
        out: list[base.CircuitInfo] = []
        for task, row in zip(tasks, rows, strict=True):
            if row:
                flat: list[bytes] = [x for pair in row.items() for x in pair]
                out.append(decode.circuit_from_hash(task, flat))
        return out

    async def reset_circuit(self, task: str) -> None:
        k = self.keys
        await self._conn.run("circuit-reset", [k.circuits, k.wake], [task])

    # -- heartbeats ----------------------------------------------------------------
    async def record_heartbeat(self, worker: base.WorkerInfo) -> None:
        info = worker.to_dict()
        info.pop("last_seen", None)
        k = self.keys
        await self._conn.run(
            "heartbeat", [k.workers, k.workers_seen], [worker.id, serialization.dumps(info)]
        )

    async def list_workers(self) -> list[base.WorkerInfo]:
        client, _ = self._conn.ready()
        async with self._conn.errors("list_workers"):
            pipe = client.pipeline(transaction=False)
            pipe.hgetall(self.keys.workers)
            pipe.zrange(self.keys.workers_seen, 0, -1, withscores=True)
            described, seen = await pipe.execute()
        last_seen = {member.decode(): float(score) for member, score in seen}
        return [
            worker_from_blob(wid, raw, last_seen.get(wid, 0.0))
            for wid, raw in sorted((key.decode(), raw) for key, raw in described.items())
        ]

    async def remove_worker(self, worker_id: str) -> None:
        k = self.keys
        await self._conn.run("forget-workers", [k.workers, k.workers_seen], ["", worker_id])

    async def prune_workers(self, older_than: float) -> int:
        k = self.keys
        return int(
            await self._conn.run("forget-workers", [k.workers, k.workers_seen], [older_than, ""])
        )

    # -- schedules -----------------------------------------------------------------
    async def sync_schedules(
        self, specs: Sequence[base.ScheduleSpec], first_fires: Mapping[str, float | None]
    ) -> list[base.ScheduleRecord]:
        if not specs:
            self._conn.ready()
            return []
        argv: list[Any] = []
        for spec in specs:
            argv += (
                spec.name,
                spec.fingerprint,
                records.spec_json(spec),
                _opt(spec.cron),
                _float_text(spec.every),
                _float_text(first_fires.get(spec.name)),
            )
        rows = await self._conn.run("schedule-sync", [self.keys.schedules], argv)
        return [records.schedule_from_hash(row) for row in rows]

    async def list_schedules(self) -> list[base.ScheduleRecord]:
        rows = await self._conn.run("schedule-read", [self.keys.schedules], ["list"])
        return sorted((records.schedule_from_hash(row) for row in rows), key=lambda r: r.name)

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
        argv = [
            name,
            "" if paused is None else ("1" if paused else "0"),
            _opt(cron),
            _float_text(every),
            "1" if reschedule else "0",
            _float_text(next_fire_at),
        ]
        row = await self._conn.run("schedule-update", [self.keys.schedules], argv)
        return records.schedule_from_hash(row) if row else None

    async def advance_schedule(
        self, name: str, fired_at: float, next_fire_at: float | None, *, fired: bool = True
    ) -> bool:
        argv = [name, _float_text(fired_at), _float_text(next_fire_at), "1" if fired else "0"]
        return bool(await self._conn.run("schedule-advance", [self.keys.schedules], argv))

    async def delete_schedules(self, names: Sequence[str]) -> int:
        if not names:
            self._conn.ready()
            return 0
        argv = ["delete", *dict.fromkeys(names)]
        return int(await self._conn.run("schedule-read", [self.keys.schedules], argv))

    # -- job statistics ------------------------------------------------------------
    async def record_job_stats(self, stats: Sequence[base.JobStat]) -> None:
        if not stats:
            self._conn.ready()
            return
        argv: list[Any] = [len(DURATION_BUCKETS)]
        for stat in stats:
            buckets = list(stat.buckets) + [0] * (len(DURATION_BUCKETS) - len(stat.buckets))
            argv += (stat.task, stat.queue, stat.status, stat.count, repr(stat.duration_sum))
            argv += buckets[: len(DURATION_BUCKETS)]
        k = self.keys
        await self._conn.run("stats-record", [k.stats, k.stat_minutes], argv)

    async def job_stat_totals(self) -> list[base.JobStat]:
        k = self.keys
        flat = await self._conn.run("stats-read", [k.stats, k.stat_minutes], ["totals", 0])
        return sorted(records.stats_from_hash(flat, 0.0), key=records.stat_order)

    async def job_stat_series(self, since: float) -> list[base.JobStat]:
        k = self.keys
        minutes = await self._conn.run(
            "stats-read", [k.stats, k.stat_minutes], ["series", _float_text(since)]
        )
        out: list[base.JobStat] = []
        for minute, flat in minutes:
            out.extend(sorted(records.stats_from_hash(flat, float(minute)), key=records.stat_order))
        return out

    async def prune_job_stats(self, older_than: float) -> int:
        k = self.keys
        return int(
            await self._conn.run("stats-read", [k.stats, k.stat_minutes], ["prune", older_than])
        )

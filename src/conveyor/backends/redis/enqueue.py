"""Enqueue: one ``enqueue-5.lua`` call per batch (idempotency keys and queue
bounds are checked by the script, atomically), plus ``WAIT`` in the same
pipeline when the URL asks for replica acknowledgements.

The returned :class:`Job` values are built here from what was sent; the reply
adds only the server's clock, and for the few jobs whose options changed them,
their state, due time and TTL. From ``OVERLAP_FROM`` jobs that building runs
while the server runs the script.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import msgpack
from redis.exceptions import NoScriptError

from conveyor import serialization
from conveyor.backends import base
from conveyor.backends.redis import decode
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.encode import opt
from conveyor.backends.rows import decode_fields
from conveyor.errors import BackendError, InvalidWorkflow, NotReplicated, QueueFull
from conveyor.job import DependencyPolicy, FailureReason, Job, JobState

#: From this many jobs, enqueue_jobs builds the Job objects while the script runs.
OVERLAP_FROM = 16
#: How long WAIT mode's fence write lives (it only has to outlive its WAIT).
FENCE_TTL_MS = 60_000

#: The states a new job may start in, as the script names them.
_STARTS = {
    b"waiting": JobState.WAITING,
    b"delayed": JobState.DELAYED,
    b"blocked": JobState.BLOCKED,
    b"cancelled": JobState.CANCELLED,
}
_RUN = DependencyPolicy.RUN


def _retrieve(call: asyncio.Future[Any]) -> None:
    """Consume the outcome of a call whose caller went away (no "never retrieved")."""
    if not call.cancelled():
        call.exception()


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
        and not new.depends_on
        and new.on_dependency_failure is not _RUN
        and new.workflow_id is None
        and new.concurrency_key is None
        and new.debounce is None
        and new.rate_limit_key is None
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
            list(new.depends_on) or None,
            new.on_dependency_failure.value if new.on_dependency_failure is _RUN else None,
            new.workflow_id,
            new.concurrency_key,
            None if new.debounce is None else float(new.debounce),
            new.rate_limit_key,
        ],
        use_bin_type=False,  # the server's cmsgpack reads no bin type: bytes go as str
    )
    return packed


async def enqueue_jobs(conn: RedisConnection, jobs: Sequence[base.NewJob]) -> list[Job]:
    if not jobs:
        conn.ready()
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
                opt(new.timeout),
                _enqueue_options(new),
            )
        )
    k = conn.keys
    keys = [k.all, k.delayed, k.expiring, k.queues, k.wake]
    if len(jobs) < OVERLAP_FROM:
        # A few jobs: sent at once, built after (a task to overlap them costs more).
        reply = await _enqueue_call(conn, keys, argv)
        built = [_new_job(new) for new in jobs]
    else:
        call = asyncio.ensure_future(_enqueue_call(conn, keys, argv))
        try:
            # Build the Job objects while the server runs the script: only the
            # server's clock is missing from most of them.
            await asyncio.sleep(0)
            built = [_new_job(new) for new in jobs]
            reply = await asyncio.shield(call)
        except asyncio.CancelledError:
            call.add_done_callback(_retrieve)
            raise
    tag = reply[0]
    if tag == b"full":
        raise QueueFull(reply[1].decode(), int(reply[2]))
    if tag == b"exists":
        raise BackendError(f"a job with id {reply[1].decode()!r} already exists")
    if tag == b"unknown":
        raise InvalidWorkflow(
            f"job {reply[1].decode()} depends on {reply[2].decode()}, which does not exist"
        )
    now = float(reply[1])
    out = []
    for job, item in zip(built, reply[2:], strict=True):
        if item == b"n":  # waiting, due now, no TTL
            job.run_at = job.created_at = now
        elif item[0] == b"n":
            _, state, run_at, ttl, expires_at = item
            job.state = _STARTS[state]
            if job.state is JobState.CANCELLED:  # a dependency failed already
                job.failure_reason = FailureReason.DEPENDENCY_FAILED
                job.finished_at = now
            job.run_at = float(run_at)
            job.created_at = now
            job.ttl = float(ttl) if ttl else None
            job.expires_at = float(expires_at) if expires_at else None
        else:
            job = _duplicate(item)
        out.append(job)
    return out


async def _enqueue_call(conn: RedisConnection, keys: list[str], argv: list[Any]) -> Any:
    replicas = conn.options.wait_replicas
    if not replicas:
        return await conn.run("enqueue", keys, argv)
    client, runner = conn.ready()
    sha, rest = runner.args("enqueue", keys, argv)
    timeout_ms = max(1, math.ceil(conn.options.wait_timeout * 1000))
    async with conn.errors("enqueue"):
        # One pipeline = one connection: WAIT counts the writes made on it.
        for attempt in (1, 2):
            pipe = client.pipeline(transaction=False)
            pipe.evalsha(sha, *rest)
            pipe.execute_command("WAIT", replicas, timeout_ms)
            reply, acked = await pipe.execute(raise_on_error=False)
            # redis-py strips the NOSCRIPT code from the message: test the type.
            if isinstance(reply, NoScriptError) and attempt == 1:
                await runner.load_all()
                continue
            break
        if isinstance(reply, Exception):
            raise reply
        if isinstance(acked, Exception):
            raise acked
        if reply[0] == b"ok" and _names_earlier_jobs(reply):
            # An answer naming jobs an earlier call stored (a retry after
            # NotReplicated, from another process maybe) wrote nothing, and a
            # server may count only this connection's own last write in WAIT:
            # a write of ours after those jobs, then WAIT, covers them anyway.
            pipe = client.pipeline(transaction=False)
            pipe.set(conn.keys.fence, b"1", px=FENCE_TTL_MS)
            pipe.execute_command("WAIT", replicas, timeout_ms)
            _, acked = await pipe.execute()
    if reply[0] == b"ok" and int(acked) < replicas:
        raise NotReplicated(
            f"redis: the enqueue reached {int(acked)} of {replicas} replica(s) within "
            f"{conn.options.wait_timeout:g}s; the jobs are on the primary but could be "
            "lost if it fails now",
            acknowledged=int(acked),
            required=replicas,
        )
    return reply


def _names_earlier_jobs(reply: Any) -> bool:
    """True when an enqueue's reply returns a job stored before this call."""
    return any(isinstance(item, list) and item[0] == b"d" for item in reply[2:])


def _duplicate(item: Any) -> Job:
    """The job a live idempotency key points at (``d``; a debounce postponed it,
    maybe), what the key remembers of a job retention deleted (``g``), or a new
    job a later debounced entry of the batch changed (``r``)."""
    if item[0] == b"d":
        return decode.job_from_hash(item[1], duplicate=True)
    if item[0] == b"r":
        return decode.job_from_hash(item[1])
    state = item[4].decode() or JobState.COMPLETED.value
    return Job(
        id=item[1].decode(),
        task=item[2].decode(),
        queue=item[3].decode(),
        state=JobState(state),
        idempotency_key=item[5].decode(),
        duplicate=True,
    )


def _new_job(new: base.NewJob) -> Job:
    """A waiting Job for ``new``; the caller fills in the server's times.
    The common case (a JSON payload, no metadata) is decoded inline; anything
    else goes through the decoder every backend shares."""
    fields = None
    if new.metadata is None:
        try:
            payload = serialization.loads(new.payload)
        except ValueError:
            fields = decode_fields(new.payload)
    else:
        fields = decode_fields(new.payload, new.metadata)
    metadata: dict[str, Any] = {}
    problem: str | None = None
    if fields is not None:
        payload, metadata, problem = fields.payload, fields.metadata, fields.problem
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
        depends_on=tuple(new.depends_on),
        on_dependency_failure=new.on_dependency_failure,
        workflow_id=new.workflow_id,
        concurrency_key=new.concurrency_key,
        rate_limit_key=new.rate_limit_key,
        decode_error=problem,
    )

"""Operator actions and bookkeeping: cancel, dead-letter retry, deletes and
purges, queue settings, circuits, and worker heartbeats. Each change is one
script; the reads of circuits and workers are one pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence

from conveyor import serialization
from conveyor.backends import base
from conveyor.backends.redis import decode
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.encode import filter_args, float_text, opt
from conveyor.backends.rows import worker_from_blob
from conveyor.errors import BackendError, InvalidStateError, JobNotFound
from conveyor.job import Job

# -- jobs ----------------------------------------------------------------------------


async def cancel_job(conn: RedisConnection, job_id: str) -> Job | None:
    k = conn.keys
    row = await conn.run("cancel", [k.delayed, k.expiring], [job_id])
    return decode.job_from_hash(row) if row else None


async def retry_failed(conn: RedisConnection, job_id: str, new_id: str) -> Job:
    k = conn.keys
    reply = await conn.run("retry", [k.all, k.expiring, k.wake], [job_id, new_id])
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


async def delete_jobs(conn: RedisConnection, job_ids: Sequence[str]) -> int:
    if not job_ids:
        conn.ready()
        return 0
    return int(await conn.run("delete", [conn.keys.all], list(job_ids)))


async def purge_jobs(conn: RedisConnection, where: base.JobFilter) -> int:
    k = conn.keys
    argv = ["purge", 0, 0, *filter_args(where)]
    return int(await conn.run("select", [k.all, k.queues], argv))


# -- queues --------------------------------------------------------------------------


async def configure_queue(conn: RedisConnection, info: base.QueueInfo) -> None:
    """Store the queue's options; switching its fairness moves its waiting jobs
    between the per-task and the per-tenant sets (configure-2.lua)."""
    k = conn.keys
    weights = sorted(info.weights.items()) if info.fairness else []
    argv: list[object] = [info.name, opt(info.max_size), float_text(info.ttl)]
    argv += [info.fairness or "", len(weights)]
    for tenant, weight in weights:
        argv += [tenant, repr(float(weight))]
    await conn.run("configure", [k.queues, k.wake], argv)


async def set_queue_paused(conn: RedisConnection, name: str, paused: bool) -> None:
    k = conn.keys
    await conn.run("pause", [k.queues, k.wake], [name, 1 if paused else 0])


# -- circuits ------------------------------------------------------------------------


async def list_circuits(conn: RedisConnection) -> list[base.CircuitInfo]:
    client, _ = conn.ready()
    keys = conn.keys
    async with conn.errors("list_circuits"):
        tasks = sorted(m.decode() for m in await client.smembers(keys.circuits))
        pipe = client.pipeline(transaction=False)
        for task in tasks:
            pipe.hgetall(keys.circuit(task))
        rows = await pipe.execute() if tasks else []
    out: list[base.CircuitInfo] = []
    for task, row in zip(tasks, rows, strict=True):
        if row:
            flat: list[bytes] = [x for pair in row.items() for x in pair]
            out.append(decode.circuit_from_hash(task, flat))
    return out


async def reset_circuit(conn: RedisConnection, task: str) -> None:
    k = conn.keys
    await conn.run("circuit-reset", [k.circuits, k.wake], [task, "close"])


async def clear_circuit_failures(conn: RedisConnection, task: str | None) -> None:
    k = conn.keys
    await conn.run("circuit-reset", [k.circuits, k.wake], [task or "", "failures"])


# -- heartbeats ----------------------------------------------------------------------


async def record_heartbeat(conn: RedisConnection, worker: base.WorkerInfo) -> None:
    info = worker.to_dict()
    info.pop("last_seen", None)
    k = conn.keys
    await conn.run("heartbeat", [k.workers, k.workers_seen], [worker.id, serialization.dumps(info)])


async def list_workers(conn: RedisConnection) -> list[base.WorkerInfo]:
    client, _ = conn.ready()
    keys = conn.keys
    async with conn.errors("list_workers"):
        pipe = client.pipeline(transaction=False)
        pipe.hgetall(keys.workers)
        pipe.zrange(keys.workers_seen, 0, -1, withscores=True)
        described, seen = await pipe.execute()
    last_seen = {member.decode(): float(score) for member, score in seen}
    return [
        worker_from_blob(wid, raw, last_seen.get(wid, 0.0))
        for wid, raw in sorted((key.decode(), raw) for key, raw in described.items())
    ]


async def remove_worker(conn: RedisConnection, worker_id: str) -> None:
    k = conn.keys
    await conn.run("forget-workers", [k.workers, k.workers_seen], ["", worker_id])


async def prune_workers(conn: RedisConnection, older_than: float) -> int:
    k = conn.keys
    return int(await conn.run("forget-workers", [k.workers, k.workers_seen], [older_than, ""]))

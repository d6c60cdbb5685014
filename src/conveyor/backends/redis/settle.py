"""What a worker sends about the jobs it holds: outcomes (``settle-5.lua``),
lease renewals (``renew-1.lua``), progress (``progress-1.lua``), and the read
of cancel requests. Each is one round trip per batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError

from conveyor import serialization
from conveyor.backends import base
from conveyor.backends.redis import decode
from conveyor.backends.redis.claim import claim_call, claim_jobs
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.encode import opt
from conveyor.errors import BackendError

_COMPLETE = base.Outcome.COMPLETE


async def settle_jobs(
    conn: RedisConnection, settlements: Sequence[base.Settlement]
) -> base.SettleResult:
    if not settlements:
        conn.ready()
        return base.SettleResult()
    return _settle_result(await conn.run("settle", *_settle_call(conn, settlements)))


async def settle_and_claim(
    conn: RedisConnection, settlements: Sequence[base.Settlement], request: base.ClaimRequest
) -> tuple[base.SettleResult, base.ClaimResult]:
    """``settle-5.lua`` then ``claim-4.lua``, pipelined: one round trip. Each
    script is atomic; the claim runs after the settle, so it sees what the
    settle released. A claim that failed (the settle stored) claims nothing:
    the worker's own claim loop takes over."""
    _, runner = conn.ready()
    settle_call = _settle_call(conn, settlements)
    if conn.direct is None:
        # A cluster client: redis-py refuses scripts in its pipelines. Two
        # round trips; a claim that fails leaves the settle's answer standing.
        settled = await conn.run("settle", *settle_call)
        try:
            return _settle_result(settled), await claim_jobs(conn, request)
        except BackendError:
            return _settle_result(settled), base.ClaimResult([])
    async with conn.errors("settle_and_claim"):
        settled, claimed = await runner.run_pair(
            ("settle", *settle_call), ("claim", *claim_call(conn, request))
        )
        if isinstance(claimed, NoScriptError) or isinstance(settled, NoScriptError):
            await runner.load_all()  # the server forgot them (restart, SCRIPT FLUSH)
        if isinstance(settled, NoScriptError):
            settled = await runner.run("settle", *settle_call)
        elif isinstance(settled, Exception):
            raise settled
    if isinstance(claimed, Exception):
        return _settle_result(settled), base.ClaimResult([])
    return _settle_result(settled), decode.claim_result(claimed)


def _settle_call(
    conn: RedisConnection, settlements: Sequence[base.Settlement]
) -> tuple[list[str], list[Any]]:
    """``settle-5.lua``'s keys and arguments."""
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
                opt(s.result),
                error,
                s.failure_reason.value if s.failure_reason is not None else "",
                s.retry_delay,
                s.circuit.threshold if s.circuit is not None else "",
                s.circuit.open_for if s.circuit is not None else 0,
                opt(s.progress),
            )
        )
    k = conn.keys
    return [k.active, k.delayed, k.circuits, k.expiring, k.wake], argv


def _settle_result(reply: Any) -> base.SettleResult:
    refused, cancelled, changes = reply
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


async def renew_leases(
    conn: RedisConnection, leases: Sequence[tuple[str, str]], lease: float
) -> base.RenewResult:
    if not leases:
        conn.ready()
        return base.RenewResult()
    argv: list[Any] = [lease]
    for job_id, token in leases:
        argv += (job_id, token)
    renewed, lost, cancel = await conn.run("renew", [conn.keys.active], argv)
    return base.RenewResult(
        set(decode.text_list(renewed)),
        set(decode.text_list(lost)),
        set(decode.text_list(cancel)),
    )


async def save_progress(conn: RedisConnection, items: Sequence[tuple[str, str, bytes]]) -> set[str]:
    if not items:
        conn.ready()
        return set()
    argv: list[Any] = []
    for job_id, token, progress in items:
        argv += (job_id, token, progress)
    refused = await conn.run("progress", [conn.keys.active], argv)
    return set(decode.text_list(refused))


async def cancel_requests(conn: RedisConnection, job_ids: Sequence[str]) -> set[str]:
    """The ids among ``job_ids`` that are active with a cancel requested."""
    client, _ = conn.ready()
    ids = list(dict.fromkeys(job_ids))
    if not ids:
        return set()
    async with conn.errors("cancel_requests"):
        pipe = client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(conn.keys.job(job_id), "s", "cr")
        rows = await pipe.execute()
    return {
        job_id
        for job_id, (state, flag) in zip(ids, rows, strict=True)
        if state == b"active" and flag == b"1"
    }

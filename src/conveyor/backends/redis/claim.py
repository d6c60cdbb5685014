"""Claims (one ``claim-4.lua`` call) and the wait for work between them.

``wait_for_work`` listens on the app's pub/sub channel (wakeup.py) and sleeps
at most until the next delayed job is due. The direct handoff to idle workers
that a claim registers is in handoff.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from conveyor.backends import base
from conveyor.backends.redis import decode
from conveyor.backends.redis.connection import RedisConnection
from conveyor.errors import BackendUnavailable
from conveyor.ids import new_token

#: Added to a delayed job's due time so the claim after the wait sees it as due.
DUE_SLACK = 0.002


async def claim_jobs(conn: RedisConnection, request: base.ClaimRequest) -> base.ClaimResult:
    return decode.claim_result(await conn.run("claim", *claim_call(conn, request)))


def claim_call(conn: RedisConnection, request: base.ClaimRequest) -> tuple[list[str], list[Any]]:
    """``claim-4.lua``'s keys and arguments for ``request`` (a fresh lease token)."""
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
    argv.append(len(request.key_limits))
    for task, cap in request.key_limits.items():
        argv += (task, cap)
    argv.append(len(request.key_rate_limits))
    for task, rate in request.key_rate_limits.items():
        argv += (task, rate.limit, rate.period)
    k = conn.keys
    return [k.delayed, k.expiring, k.active, k.done("failed")], argv


async def wait_for_work(
    conn: RedisConnection,
    queues: Sequence[str],
    timeout: float,
    next_due: Callable[[], Awaitable[float | None]],
) -> None:
    """Until work may be claimable in ``queues``, or ``timeout``; ``next_due``
    reads the seconds until the next delayed job is due (:func:`next_due`)."""
    conn.ready()
    wake = conn.wake
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
    if not was_live and wake.live and await _has_waiting(conn, listening):
        return
    while True:
        if wake.take_pending(listening):
            return
        timers = wake.timers  # a timer set during the read below makes us read again
        try:
            due = await next_due()
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


async def _has_waiting(conn: RedisConnection, queues: frozenset[str]) -> bool:
    """Whether any of ``queues`` has waiting jobs (False when Redis is down:
    the wait then times out, and the next claim reports the outage)."""
    if not queues:
        return False
    client, _ = conn.ready()
    try:
        async with conn.errors("wait_for_work"):
            keys = [conn.keys.waiting_tasks(q) for q in queues]
            keys += [conn.keys.fair_tenants(q) for q in queues]
            found = await client.exists(*keys)
    except BackendUnavailable:
        return False
    return bool(found)


async def next_due(conn: RedisConnection) -> float | None:
    """Seconds until the next delayed job is due (server clock), or None."""
    due = await conn.run("next-due", [conn.keys.delayed], [])
    return float(due) if due is not None else None

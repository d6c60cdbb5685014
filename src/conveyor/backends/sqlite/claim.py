"""claim_jobs as one synchronous transaction (promotion, TTL expiry, circuits,
rate limits, the claim), and the reads behind wait_for_work.

``claim`` runs in the writer's thread like every write (see enqueue.py);
``next_due`` and ``data_version`` run on the small watcher connection, which
the waiting side (:class:`CommitWatch`) polls while anyone waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from conveyor.backends.base import ClaimRequest, ClaimResult
from conveyor.backends.sqlite.connection import ThreadConnection
from conveyor.backends.sqlite.decode import Row, claim_order, job_from_row
from conveyor.backends.sqlite.dependencies import finished_with_dependents, resolve_dependents
from conveyor.backends.sqlite.fair import Limits, claim_fair, fair_request
from conveyor.backends.sqlite.queries import Q, json_param
from conveyor.backends.sqlite.ratekeys import RateKeyWindows
from conveyor.backends.worksignal import WorkSignal
from conveyor.errors import BackendError
from conveyor.ids import new_token

#: How often a waiting worker looks for other processes' commits.
COMMIT_POLL_INTERVAL = 0.005
#: A per-key concurrency group: (task, concurrency_key).
Group = tuple[str, str | None]
#: Added to a delayed job's due time, so the claim after the wait sees it as due
#: (event loop timers may fire up to a clock tick early).
DUE_SLACK = 0.002


def claim(conn: sqlite3.Connection, request: ClaimRequest) -> ClaimResult:
    """Promote due delayed jobs, expire TTL'd waiting ones (resolving the blocked
    jobs waiting for them), then claim (one transaction)."""
    now = time.time()
    conn.execute(Q.promote_due, {"now": now})
    expired_rows = conn.execute(Q.expire_due, {"now": now}).fetchall()
    expired = [job_from_row(r) for r in expired_rows]
    if expired_rows:
        finished = finished_with_dependents(expired_rows)
        if finished:  # a dependent released here wakes waiters by the commit watch
            resolve_dependents(conn, finished, now)
    queues = list(dict.fromkeys(request.queues))
    limit = request.limit
    if limit <= 0 or not queues:
        return ClaimResult([], expired)

    # Per-task limits for this claim. A task with nothing left is simply
    # excluded; only a cap below the batch size can bind and needs the slow path.
    excluded: set[str] = set()
    caps: dict[str, int] = {}

    def cap(task: str, allowed: int) -> None:
        if allowed <= 0:
            excluded.add(task)
        elif allowed < limit:
            caps[task] = min(caps.get(task, allowed), allowed)

    for task, free in request.task_limits.items():
        cap(task, free)
    trials: list[str] = []
    if request.circuit_tasks:
        for task, open_until in conn.execute(Q.open_circuits).fetchall():
            if open_until is None or open_until <= now:
                trials.append(task)  # its open period has passed: one trial job
                cap(task, 1)
            else:
                excluded.add(task)
    for task, rate in request.rate_limits.items():
        since = now - rate.period
        conn.execute(Q.rate_trim, {"task": task, "since": since})
        (used,) = conn.execute(Q.rate_used, {"task": task, "since": since}).fetchone()
        cap(task, rate.limit - int(used))

    # Per-key caps (of the tasks still admitted): a cap of 0 or less admits no
    # job of the task at all.
    key_caps: dict[str, int] = {}
    if request.key_limits:
        for task, allowed in request.key_limits.items():
            if allowed <= 0:
                excluded.add(task)
            elif task not in excluded:
                key_caps[task] = allowed

    params: dict[str, Any] = {
        "now": now,
        "lease_until": now + request.lease,
        "token": new_token(),
        "worker_id": request.worker_id,
        "queues": json_param(queues),
        "limit": limit,
        "blocked": json_param(sorted(excluded)),
    }
    windows = _rate_key_windows(conn, request, excluded, now)
    fair = fair_request(conn, queues)
    if fair is not None:
        limits = Limits(caps, set(excluded), key_caps, windows=windows)
        rows = claim_fair(conn, params, queues, fair, limits)
    elif caps or key_caps or windows:
        rows = _claim_capped(conn, params, caps, excluded, key_caps, windows)
    else:
        rows = conn.execute(Q.claim_fast, params).fetchall()

    if rows and (request.rate_limits or trials):
        started: dict[str, int] = {}
        for row in rows:
            started[row[1]] = started.get(row[1], 0) + 1
        starts = [
            (task, now, started[task], rate.period)
            for task, rate in request.rate_limits.items()
            if task in started
        ]
        if starts:  # the sliding log, cluster-wide
            conn.executemany(Q.rate_record, starts)
        half_open = [(now, task) for task in trials if task in started]
        if half_open:
            conn.executemany(Q.circuit_trial, half_open)
    if windows is not None and rows:
        windows.record(rows)
    rows.sort(key=claim_order)  # RETURNING has no order
    return ClaimResult([job_from_row(r) for r in rows], expired)


def _rate_key_windows(
    conn: sqlite3.Connection, request: ClaimRequest, excluded: set[str], now: float
) -> RateKeyWindows | None:
    """The per-key rate windows of the tasks still admitted (None: none)."""
    rates = {t: r for t, r in request.key_rate_limits.items() if t not in excluded}
    return RateKeyWindows(conn, rates, now) if rates else None


def _claim_capped(
    conn: sqlite3.Connection,
    params: dict[str, Any],
    caps: dict[str, int],
    excluded: set[str],
    key_caps: dict[str, int],
    windows: RateKeyWindows | None = None,
) -> list[Row]:
    """The slow path, for caps below the batch size and per-key caps.

    Candidates come in claim order; a task that reaches its cap is excluded,
    and a (task, concurrency_key) group that reaches its key cap is marked
    full, and the query re-run, so a capped task or full group at the head of
    the queue cannot starve the others behind it. Key slots start from the
    active jobs counted in the store, inside this write transaction.
    """
    excluded = set(excluded)
    taken: dict[str, int] = {}
    held: dict[Group, int] = {}
    full: set[Group] = set()
    if key_caps:
        counted = conn.execute(Q.key_slots_used, {"tasks": json_param(sorted(key_caps))})
        for task, key, used in counted.fetchall():
            held[(task, key)] = used
            if used >= key_caps[task]:
                full.add((task, key))
    rows: list[Row] = []
    remaining = int(params["limit"])
    while remaining > 0:
        params["excluded"] = json_param(sorted(excluded))
        params["limit"] = remaining
        if windows is not None:
            params["full"] = json_param([list(group) for group in full])
            params["rate_full"] = json_param([list(window) for window in windows.spent])
            candidates = conn.execute(Q.claim_rate_key_candidates, params).fetchall()
        elif key_caps:
            params["full"] = json_param([list(group) for group in full])
            candidates = conn.execute(Q.claim_key_candidates, params).fetchall()
        else:
            candidates = conn.execute(Q.claim_candidates, params).fetchall()
        chosen: list[str] = []
        skipped = False
        for candidate in candidates:
            job_id, task = candidate[0], candidate[1]
            limit = caps.get(task)
            count = taken.get(task, 0)
            if limit is not None and count >= limit:
                skipped = True
                continue
            rated = windows is not None and windows.limits(task)
            if rated and windows is not None and not windows.has_room(task, candidate[3]):
                skipped = True
                continue
            key_cap = key_caps.get(task)
            if key_cap is not None:
                group = (task, candidate[2])
                used = held.get(group, 0)
                if used >= key_cap:
                    skipped = True
                    continue
                held[group] = used + 1
                if used + 1 >= key_cap:
                    full.add(group)
            if rated and windows is not None:
                windows.take(task, candidate[3])
            chosen.append(job_id)
            taken[task] = count + 1
            if limit is not None and count + 1 >= limit:
                excluded.add(task)
        if chosen:
            params["ids"] = json_param(chosen)
            claimed = conn.execute(Q.claim_ids, params).fetchall()
            rows.extend(claimed)
            remaining -= len(claimed)
        if not skipped or len(candidates) < params["limit"]:
            break  # every candidate was taken, or there are no more
    return rows


# -- waiting -------------------------------------------------------------------


def next_due(conn: sqlite3.Connection, queues: list[str]) -> float | None:
    row = conn.execute(Q.next_due, {"queues": json_param(queues)}).fetchone()
    return None if row is None else float(row[0])


def data_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute(Q.data_version).fetchone()[0])


class CommitWatch:
    """wait_for_work: the backend's work signal, plus a poller of
    ``PRAGMA data_version`` on the watcher connection while anyone waits, so
    commits of other processes wake the waiters within milliseconds."""

    def __init__(self, watcher: ThreadConnection) -> None:
        self.signal = WorkSignal()
        self._watcher = watcher
        self._seen_version: int | None = None
        self._poller: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Remember the version as of opening (the watcher is open)."""
        self._seen_version = await self._watcher.call(data_version)

    def reset(self) -> None:
        """A fresh signal for a backend (re)opened."""
        self.signal = WorkSignal()

    async def stop(self) -> None:
        poller, self._poller = self._poller, None
        if poller is not None and not poller.done():
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                await poller
        self.signal.close()

    async def wait(self, queues: Sequence[str], timeout: float) -> None:
        wanted = frozenset(queues)
        if self.signal.take_pending(wanted):
            return
        future = self.signal.add(wanted)
        try:
            self._ensure_poller()
            if wanted:
                due = await self._watcher.call(next_due, sorted(wanted))
                if due is not None:  # a delayed job becomes due before the timeout
                    timeout = min(timeout, due - time.time() + DUE_SLACK)
            if timeout > 0 and not future.done():
                await asyncio.wait([future], timeout=timeout)
        finally:
            self.signal.remove(future)

    def _ensure_poller(self) -> None:
        loop = asyncio.get_running_loop()
        poller = self._poller
        if poller is None or poller.done() or poller.get_loop() is not loop:
            self._poller = loop.create_task(self._poll_commits(), name="conveyor-sqlite-watch")

    async def _poll_commits(self) -> None:
        """While anyone waits: wake them all when another connection committed."""
        try:
            while self.signal.has_waiters:
                version = await self._watcher.call(data_version)
                if version != self._seen_version:
                    self._seen_version = version
                    self.signal.notify_all()
                await asyncio.sleep(COMMIT_POLL_INTERVAL)
        except BackendError:
            self.signal.notify_all()  # the waiters' next claim reports the problem

"""Claims in memory: promotion and expiry, per-task budgets, and waiting for work."""

from __future__ import annotations

import asyncio
import heapq
import sys
from collections.abc import Sequence

from conveyor.backends.base import CircuitState, ClaimRequest, ClaimResult
from conveyor.backends.memory.store import RateLog, Row, Store, WaitEntry, to_job
from conveyor.ids import new_token
from conveyor.job import ErrorInfo, FailureReason, Job, JobState

_UNLIMITED = sys.maxsize
#: Margin added to a timer wake-up so that the claim after it sees the job as due.
_TIMER_SLACK = 0.002


def _promote_and_expire(store: Store, now: float) -> list[Job]:
    while store.delayed and store.delayed[0][0] <= now:
        _, job_id, seq = heapq.heappop(store.delayed)
        row = store.live(job_id, seq, JobState.DELAYED)
        if row is not None:
            store.move(row, JobState.WAITING)
    expired: list[Job] = []
    while store.expiring and store.expiring[0][0] <= now:
        _, job_id, seq = heapq.heappop(store.expiring)
        row = store.live(job_id, seq, JobState.WAITING)
        if row is None:
            continue
        row.failure_reason = FailureReason.EXPIRED
        row.finished_at = now
        row.errors += (
            ErrorInfo(
                type="Expired",
                message="queue TTL expired",
                attempt=row.attempts,
                reason=FailureReason.EXPIRED.value,
                at=now,
            ),
        )
        store.move(row, JobState.FAILED)
        expired.append(to_job(row))
    return expired


def _task_budget(store: Store, task: str, request: ClaimRequest, now: float) -> tuple[int, bool]:
    """How many jobs of ``task`` this claim may take, and whether the first
    one is a half-open circuit's trial."""
    budget = request.task_limits.get(task, _UNLIMITED)
    trial = False
    if request.circuit_tasks:
        circuit = store.circuits.get(task)
        if circuit is not None and circuit.state is not CircuitState.CLOSED:
            if circuit.open_until is not None and circuit.open_until > now:
                return 0, False
            budget = min(budget, 1)
            trial = True
    rate = request.rate_limits.get(task)
    if rate is not None:
        log = store.rates.get(task)
        if log is not None:
            log.trim(now, rate.period)
            budget = min(budget, max(0, rate.limit - len(log.starts)))
        else:
            budget = min(budget, rate.limit)
    return max(0, budget), trial


def claim_jobs(store: Store, request: ClaimRequest) -> ClaimResult:
    now = store.now()
    expired = _promote_and_expire(store, now)
    claimed: list[Job] = []
    if request.limit <= 0:
        return ClaimResult(claimed, expired)
    budgets: dict[str, tuple[int, bool]] = {}
    heads: list[tuple[int, float, str, str, str]] = []  # (-prio, run_at, id, queue, task)
    for queue in dict.fromkeys(request.queues):
        info = store.queues.get(queue)
        if info is not None and info.paused:
            continue
        by_task = store.waiting.get(queue)
        if not by_task:
            continue
        for task, heap in list(by_task.items()):
            store.clean_waiting(heap)
            if not heap:
                del by_task[task]
                continue
            if task not in budgets:
                budgets[task] = _task_budget(store, task, request, now)
            if budgets[task][0] > 0:
                neg_priority, run_at, job_id, _ = heap[0]
                heads.append((neg_priority, run_at, job_id, queue, task))
    heapq.heapify(heads)
    token = new_token()
    key_limits = request.key_limits
    skipped: list[tuple[list[WaitEntry], WaitEntry]] = []  # full groups' jobs, put back after
    while heads and len(claimed) < request.limit:
        _, _, _, queue, task = heapq.heappop(heads)
        left, trial = budgets[task]
        if left <= 0:
            continue
        heap = store.waiting[queue][task]
        entry = heapq.heappop(heap)
        row = store.jobs[entry[2]]
        cap = key_limits.get(task)
        if (
            cap is not None and store.running_keys.get((task, row.concurrency_key), 0) >= cap
        ) or _key_rate_spent(store, request, row, now):
            skipped.append((heap, entry))
        else:
            _claim_row(store, row, request, token, now)
            claimed.append(to_job(row))
            left -= 1
            budgets[task] = (left, False)
            if trial:
                circuit = store.circuits[task]
                circuit.state = CircuitState.HALF_OPEN
                circuit.open_until = now + circuit.open_for
            rate = request.rate_limits.get(task)
            if rate is not None:
                log = store.rates.setdefault(task, RateLog(rate.period))
                log.period = max(log.period, rate.period)
                log.starts.append(now)
            _count_key_rate(store, request, row, now)
        store.clean_waiting(heap)
        if heap and left > 0:
            neg_priority, run_at, next_id, _ = heap[0]
            heapq.heappush(heads, (neg_priority, run_at, next_id, queue, task))
    for heap, entry in skipped:
        heapq.heappush(heap, entry)
    return ClaimResult(claimed, expired)


def _key_rate_spent(store: Store, request: ClaimRequest, row: Row, now: float) -> bool:
    """The job's (task, rate_limit_key) window is at its limit (key_rate_limits)."""
    rate = request.key_rate_limits.get(row.task)
    if rate is None:
        return False
    log = store.key_rates.get((row.task, row.rate_limit_key))
    if log is None:
        return False
    log.trim(now, rate.period)
    return len(log.starts) >= rate.limit


def _count_key_rate(store: Store, request: ClaimRequest, row: Row, now: float) -> None:
    """Log a claimed job's start in its (task, rate_limit_key) window."""
    rate = request.key_rate_limits.get(row.task)
    if rate is not None:
        log = store.key_rates.setdefault((row.task, row.rate_limit_key), RateLog(rate.period))
        log.period = max(log.period, rate.period)
        log.starts.append(now)


def _claim_row(store: Store, row: Row, request: ClaimRequest, token: str, now: float) -> None:
    row.attempts += 1
    row.lease_until = now + request.lease
    row.lease_token = token
    row.worker_id = request.worker_id
    row.started_at = now
    store.move(row, JobState.ACTIVE)


async def wait_for_work(store: Store, queues: Sequence[str], timeout: float) -> None:
    """Wait until work is notified on ``queues``, the next delayed job is due, or
    ``timeout``; the lock is held only between the waits, never across one."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, timeout)
    listening = frozenset(queues)
    while True:
        with store.lock:
            if store.pending.take(listening):
                return
            remaining = deadline - loop.time()
            due = store.next_due()
            if due is not None:
                remaining = min(remaining, due - store.now() + _TIMER_SLACK)
            if remaining <= 0:
                return
            future: asyncio.Future[bool] = loop.create_future()
            store.waiters[future] = listening
        try:
            done, _ = await asyncio.wait({future}, timeout=remaining)
        finally:
            with store.lock:
                store.waiters.pop(future, None)
            if not future.done():
                future.cancel()
        if not done or future.result():
            return
        # A timer-only wake: the next delayed job may be due sooner; look again.

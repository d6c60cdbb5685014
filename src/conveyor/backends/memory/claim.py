"""Claims in memory: promotion and expiry, per-task budgets, fair queues'
weighted round-robin across tenants, and waiting for work."""

from __future__ import annotations

import asyncio
import heapq
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from conveyor.backends.base import CircuitState, ClaimRequest, ClaimResult
from conveyor.backends.fairness import tenant_order
from conveyor.backends.memory.store import (
    FairClock,
    HeapKey,
    RateLog,
    Row,
    Store,
    WaitEntry,
    to_job,
)
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


Head = tuple[int, float, str, str, HeapKey]  # (-prio, run_at, id, queue, heap key)


@dataclass(slots=True)
class _Claim:
    """One claim's working state: task budgets, the plain queues' merged heads,
    the fair queues' heaps by tenant, and the capped jobs set aside."""

    store: Store
    request: ClaimRequest
    now: float
    budgets: dict[str, tuple[int, bool]] = field(default_factory=dict)
    heads: list[Head] = field(default_factory=list)
    fair: dict[str, dict[str | None, dict[str, list[WaitEntry]]]] = field(default_factory=dict)
    skipped: list[tuple[list[WaitEntry], WaitEntry]] = field(default_factory=list)

    def left(self, task: str) -> int:
        if task not in self.budgets:
            self.budgets[task] = _task_budget(self.store, task, self.request, self.now)
        return self.budgets[task][0]

    def capped(self, row: Row) -> bool:
        """The job's key group is full or its rate window per key is spent."""
        cap = self.request.key_limits.get(row.task)
        return (
            cap is not None
            and self.store.running_keys.get((row.task, row.concurrency_key), 0) >= cap
        ) or _key_rate_spent(self.store, self.request, row, self.now)

    def usable_head(self, heap: list[WaitEntry]) -> WaitEntry | None:
        """The first job of ``heap`` whose key group has room and whose rate
        window per key is not spent; the others are set aside (slots and
        windows only fill up during a claim) and put back at its end."""
        while True:
            self.store.clean_waiting(heap)
            if not heap:
                return None
            if not self.capped(self.store.jobs[heap[0][2]]):
                return heap[0]
            self.skipped.append((heap, heapq.heappop(heap)))

    def plain_head(self) -> Head | None:
        while self.heads:
            head = self.heads[0]
            heap = self.store.waiting[head[3]][head[4]]
            entry = self.usable_head(heap) if self.left(head[4][0]) > 0 else None
            if entry is not None and entry[2] == head[2]:
                return head
            heapq.heappop(self.heads)
            if entry is not None:
                heapq.heappush(self.heads, (entry[0], entry[1], entry[2], head[3], head[4]))
        return None

    def fair_head(self, queue: str) -> tuple[float, str | None, Head] | None:
        """The job the rule picks next from fair ``queue``: ``(effective, tenant, head)``."""
        clock = self.store.fair.setdefault(queue, FairClock())
        best: tuple[float, tuple[bool, str], str | None, Head] | None = None
        tenants = self.fair[queue]
        for tenant in list(tenants):
            by_task = tenants[tenant]
            first: Head | None = None
            for task, heap in by_task.items():
                if self.left(task) <= 0:
                    continue
                entry = self.usable_head(heap)
                if entry is not None and (first is None or entry[:3] < first[:3]):
                    first = (entry[0], entry[1], entry[2], queue, (task, tenant))
            if first is None:
                if not any(by_task.values()):
                    del tenants[tenant]
                continue
            effective = max(clock.passes.get(tenant, clock.vtime), clock.vtime)
            key = (effective, tenant_order(tenant))
            if best is None or key < best[:2]:
                best = (effective, key[1], tenant, first)
        return None if best is None else (best[0], best[2], best[3])

    def take(self, head: Head, token: str) -> Job:
        queue, key = head[3], head[4]
        task = key[0]
        heap = self.store.waiting[queue][key]
        entry = heapq.heappop(heap)
        row = self.store.jobs[entry[2]]
        left, trial = self.budgets[task]
        _claim_row(self.store, row, self.request, token, self.now)
        self.budgets[task] = (left - 1, False)
        if trial:
            circuit = self.store.circuits[task]
            circuit.state = CircuitState.HALF_OPEN
            circuit.open_until = self.now + circuit.open_for
        rate = self.request.rate_limits.get(task)
        if rate is not None:
            log = self.store.rates.setdefault(task, RateLog(rate.period))
            log.period = max(log.period, rate.period)
            log.starts.append(self.now)
        _count_key_rate(self.store, self.request, row, self.now)
        return to_job(row)


def claim_jobs(store: Store, request: ClaimRequest) -> ClaimResult:
    now = store.now()
    expired = _promote_and_expire(store, now)
    claimed: list[Job] = []
    if request.limit <= 0:
        return ClaimResult(claimed, expired)
    work = _Claim(store, request, now)
    for queue in dict.fromkeys(request.queues):
        info = store.queues.get(queue)
        if info is not None and info.paused:
            continue
        heaps = store.waiting.get(queue)
        if not heaps:
            continue
        fair = info is not None and info.fairness is not None
        for key, heap in list(heaps.items()):
            store.clean_waiting(heap)
            if not heap:
                del heaps[key]
            elif fair:
                work.fair.setdefault(queue, {}).setdefault(key[1], {})[key[0]] = heap
            else:
                neg_priority, run_at, job_id, _ = heap[0]
                work.heads.append((neg_priority, run_at, job_id, queue, key))
    heapq.heapify(work.heads)
    token = new_token()
    while len(claimed) < request.limit:
        chosen = work.plain_head()
        fair_pick: tuple[str, float, str | None] | None = None
        for queue in work.fair:
            picked = work.fair_head(queue)
            if picked is not None and (chosen is None or picked[2][:3] < chosen[:3]):
                chosen = picked[2]
                fair_pick = (queue, picked[0], picked[1])
        if chosen is None:
            break
        if fair_pick is None:
            heapq.heappop(work.heads)
        else:
            queue, effective, tenant = fair_pick
            clock = store.fair[queue]
            weight = store.queues[queue].weight(tenant)
            clock.passes[tenant] = effective + 1.0 / weight
            clock.vtime = effective
        claimed.append(work.take(chosen, token))
        if fair_pick is None:
            heap = store.waiting[chosen[3]][chosen[4]]
            store.clean_waiting(heap)
            if heap:
                neg_priority, run_at, next_id, _ = heap[0]
                heapq.heappush(work.heads, (neg_priority, run_at, next_id, chosen[3], chosen[4]))
    for heap, entry in work.skipped:
        heapq.heappush(heap, entry)
    for queue in work.fair:
        kept = store.fair.get(queue)
        if kept is not None:
            _forget_passed(kept)
    return ClaimResult(claimed, expired)


#: A fair queue's passes are trimmed once it holds more than this many tenants.
_PASSES_KEPT = 256


def _forget_passed(clock: FairClock) -> None:
    """Drop passes at or below vtime: they would be clamped to it anyway."""
    if len(clock.passes) > _PASSES_KEPT:
        clock.passes = {t: p for t, p in clock.passes.items() if p > clock.vtime}


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

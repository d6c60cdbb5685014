"""The stats reporter: counts and durations of finished runs, aggregated in
memory per ``(task, queue, status)`` and flushed to the backend every few
seconds and at shutdown.

This is how ``conveyor serve``'s ``/metrics`` sees jobs that ran in every other
worker process: the backend adds each flush into cumulative totals. The hot
path is one dict update per run; I/O happens only in :meth:`flush`. The worker
calls it directly rather than through the event bus: events are only built
when someone listens, and these counts must never depend on that.
"""

from __future__ import annotations

import asyncio
import bisect
import logging

from conveyor.backends.base import DURATION_BUCKETS, Backend, JobStat, Outcome
from conveyor.errors import BackendError

logger = logging.getLogger("conveyor.worker")

#: The status a run is counted under, by the outcome the worker decided.
#: RELEASE (given back at shutdown) is not a finished run and is not counted.
STATUS_OF: dict[Outcome, str] = {
    Outcome.COMPLETE: "completed",
    Outcome.RETRY: "retried",
    Outcome.FAIL: "failed",
    Outcome.CANCEL: "cancelled",
}

_Key = tuple[str, str, str]


class StatsReporter:
    def __init__(self, backend: Backend, interval: float) -> None:
        self._backend = backend
        self._interval = interval
        self._pending: dict[_Key, JobStat] = {}
        self._flushing = asyncio.Lock()  # the shutdown flush waits for a periodic one

    @property
    def pending(self) -> int:
        """Runs counted but not yet stored."""
        return sum(stat.count for stat in self._pending.values())

    def add(self, task: str, queue: str, status: str, duration: float, count: int = 1) -> None:
        """``count`` runs of ``duration`` seconds each (a batch's jobs share one)."""
        key = (task, queue, status)
        stat = self._pending.get(key)
        if stat is None:
            stat = self._pending[key] = JobStat(task, queue, status)
        stat.count += count
        stat.duration_sum += duration * count
        # The first bound >= duration; the last bound is +Inf, so it always exists.
        stat.buckets[bisect.bisect_left(DURATION_BUCKETS, duration)] += count

    def add_outcome(
        self, task: str, queue: str, outcome: Outcome, duration: float, count: int = 1
    ) -> None:
        status = STATUS_OF.get(outcome)
        if status is not None:
            self.add(task, queue, status, duration, count)

    async def flush_at_exit(self, timeout: float = 10.0) -> None:
        """The last flush before the worker exits; says what could not be stored."""
        try:
            stored = await asyncio.wait_for(self.flush(), timeout=timeout)
        except TimeoutError:
            stored = False
        if not stored:
            logger.warning("statistics of %d run(s) were not stored", self.pending)

    async def flush(self) -> bool:
        """Store what was counted; on failure keep it for the next flush."""
        async with self._flushing:
            if not self._pending:
                return True
            batch, self._pending = self._pending, {}
            try:
                await self._backend.record_job_stats(list(batch.values()))
            except (BackendError, OSError) as exc:
                logger.warning("could not store job statistics, will retry: %s", exc)
                for key, stat in batch.items():
                    self._merge_back(key, stat)
                return False
            return True

    def _merge_back(self, key: _Key, stat: JobStat) -> None:
        newer = self._pending.get(key)
        if newer is None:
            self._pending[key] = stat
            return
        newer.count += stat.count
        newer.duration_sum += stat.duration_sum
        newer.buckets = [a + b for a, b in zip(newer.buckets, stat.buckets, strict=True)]

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.flush()

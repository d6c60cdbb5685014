"""Keeps the leases of held jobs (running or prefetched) alive, and stops trusting
them when it can't (G4).

Every tick it: interrupts jobs whose local lease deadline passed (renewals
failed for too long: another worker may soon claim them); renews all leases
when a renewal is due, those of finished jobs whose outcome is not stored yet
included (a store outage must not have a job this worker finished recovered
and run again); asks the backend which running jobs have a cancel
request; saves progress reported since the last tick. Each is one round trip
for the whole batch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Sequence

from conveyor.backends.base import Backend
from conveyor.errors import BackendError
from conveyor.events import EventBus
from conveyor.worker.running import Running

logger = logging.getLogger("conveyor.worker")


class LeaseKeeper:
    def __init__(
        self,
        backend: Backend,
        worker_id: str,
        held: Sequence[dict[str, Running]],
        lease: float,
        on_cancel_request: Callable[[str], None],
        events: EventBus | None = None,
        unsettled: Callable[[], Sequence[tuple[str, str]]] = lambda: (),
    ) -> None:
        self._backend = backend
        #: ``(job id, lease token)`` of finished jobs whose outcome is not stored yet.
        self._unsettled = unsettled
        self._events = events
        self._worker_id = worker_id
        #: Running jobs and buffered ones: both hold leases.
        self._held = held
        self._lease = lease
        self._on_cancel_request = on_cancel_request
        self.renew_every = lease / 3
        # Stop trusting a lease well before it ends, so the handler is cancelled
        # before any other worker could claim the job.
        self.trust_for = lease * 0.8
        self.tick = min(0.5, self.renew_every)
        # Distrust is checked on its own, finer timer: between the trust deadline
        # and the lease's end there must be room for at least one check.
        self.watch_tick = min(self.tick, (lease - self.trust_for) / 2)
        self._last_renew = time.monotonic()
        #: Set while a renewal round trip is out: a failure of the upkeep then is its failure.
        self._renew_started: float | None = None

    def _runs(self) -> Iterator[Running]:
        for runs in self._held:
            yield from runs.values()

    def trusted_until(self, sent_at: float) -> float:
        return sent_at + self.trust_for

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._watch())
            group.create_task(self._upkeep())

    async def _watch(self) -> None:
        """Separate from the upkeep, so that a renewal that hangs cannot delay it (G4)."""
        while True:
            await asyncio.sleep(self.watch_tick)
            self._distrust_expired(time.monotonic())

    async def _upkeep(self) -> None:
        while True:
            await asyncio.sleep(self.tick)
            if not any(self._held) and not self._unsettled():
                continue
            now = time.monotonic()
            try:
                # A round trip that hangs is given up (TimeoutError is an OSError).
                async with asyncio.timeout(self._lease):
                    if now - self._last_renew >= self.renew_every:
                        await self._renew(now)
                    await self._poll_cancels()
                    await self._save_progress()
            except (BackendError, OSError) as exc:
                if self._renew_started is not None:
                    self._report_renewal(0, 0, exc)
                logger.warning("lease upkeep failed, will retry: %s", exc)

    def _report_renewal(self, renewed: int, lost: int, error: BaseException | None) -> None:
        """The ``leases_renewed`` event of the renewal round trip that just ended."""
        started, self._renew_started = self._renew_started, None
        events = self._events
        if events is None or started is None or not events.has("leases_renewed"):
            return
        events.emit(
            "leases_renewed",
            renewed=renewed,
            lost=lost,
            seconds=time.perf_counter() - started,
            error=error,
        )

    def _distrust_expired(self, now: float) -> None:
        for run in list(self._runs()):
            if run.lease_deadline and now >= run.lease_deadline and run.stop_reason != "lease_lost":
                logger.error(
                    "lease of job %s could not be renewed in time; cancelling it", run.job.id
                )
                run.interrupt("lease_lost")

    async def _renew(self, sent_at: float) -> None:
        runs = [r for r in self._runs() if r.stop_reason != "lease_lost"]
        leases = {r.job.id: r.job.lease_token or "" for r in runs}
        # An outcome being stored still needs its lease; once stored (or
        # refused) the renewal reports it lost, which asks nothing of us.
        for job_id, token in self._unsettled():
            leases.setdefault(job_id, token)
        if not leases:
            return
        self._renew_started = time.perf_counter()
        result = await self._backend.renew_leases(
            self._worker_id, list(leases.items()), self._lease
        )
        # Counted over held jobs only: an outcome stored meanwhile reads "lost".
        held = {r.job.id for r in runs}
        self._report_renewal(len(held & set(result.renewed)), len(held & set(result.lost)), None)
        self._last_renew = sent_at
        deadline = self.trusted_until(sent_at)
        for run in runs:
            job_id = run.job.id
            if job_id in result.renewed:
                run.lease_deadline = deadline
            elif job_id in result.lost:
                logger.warning("lease of job %s was lost; cancelling its handler", job_id)
                run.interrupt("lease_lost")
        for job_id in result.cancel_requested:
            self._on_cancel_request(job_id)

    async def _poll_cancels(self) -> None:
        ids = [run.job.id for run in self._runs() if run.stop_reason is None]
        if ids:
            for job_id in await self._backend.cancel_requests(ids):
                self._on_cancel_request(job_id)

    async def _save_progress(self) -> None:
        items = []
        for run in self._runs():
            if run.unsaved_progress is not None:
                items.append((run.job.id, run.job.lease_token or "", run.unsaved_progress))
                run.unsaved_progress = None
        if items:
            await self._backend.save_progress(items)

"""The scheduler: enqueues each due slot of the app's schedules, exactly once.

Any number of schedulers may run on one backend (G6). For a due slot each one

1. enqueues the job with the idempotency key ``schedule:<name>:<fire time>``
   (G7: however many try, one job exists for that key), then
2. moves ``next_fire_at`` on with a compare-and-set (``advance_schedule``):
   only one scheduler moves a slot; the others see it moved and go on.

A scheduler killed between 1 and 2 leaves the slot due: the next scheduler to
look enqueues it again (a duplicate the key refuses) and advances it. So no
slot is fired twice, and none is lost while one scheduler lives.

All times are the backend's clock (G11). A scheduler sleeps until the earliest
next fire, but never more than ``max_sleep`` (1 s), so that pauses, cron
changes and other schedulers' progress are seen quickly; ``stop()`` wakes it.

Misfires: a slot more than ``misfire_grace`` (60 s, Quartz's default
threshold) late was missed — no scheduler ran. ``skip`` forgets every missed
slot and goes on from now; ``run_once`` fires once (keyed by the first missed
slot) for all of them and goes on from now. A slot less late than that (a
restart, a slow backend) is fired as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import TYPE_CHECKING

from conveyor import serialization
from conveyor.backends.base import Backend, MisfirePolicy, ScheduleRecord
from conveyor.errors import ConveyorError
from conveyor.scheduler.cron import fire_time_text
from conveyor.scheduler.timetable import Timetable, timetable

if TYPE_CHECKING:
    from conveyor.job import Job
    from conveyor.runtime import Runtime

logger = logging.getLogger("conveyor.scheduler")

#: A slot later than this (seconds) was missed: the misfire policy decides.
MISFIRE_GRACE = 60.0
#: The longest sleep between two looks at the schedules.
MAX_SLEEP = 1.0
#: Fires of one schedule per look (a long backlog is worked off over several).
FIRES_PER_LOOK = 100


class Scheduler:
    """Fires the schedules an app declares. ``await run()`` until ``stop()``."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        max_sleep: float = MAX_SLEEP,
        misfire_grace: float = MISFIRE_GRACE,
        install_signals: bool = False,
    ) -> None:
        self.runtime = runtime
        self.max_sleep = max_sleep
        self.misfire_grace = misfire_grace
        self.install_signals = install_signals
        self.fired = 0
        """Jobs this scheduler enqueued (duplicates refused by the key not counted)."""
        self._stop: asyncio.Event | None = None
        self._stopping = False
        self._synced = False

    def stop(self) -> None:
        self._stopping = True
        if self._stop is not None:
            self._stop.set()

    async def run(self) -> None:
        self._stop = asyncio.Event()
        if self._stopping:
            return
        loop = asyncio.get_running_loop()
        if self.install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
        logger.info("scheduler started with %d schedule(s)", len(self.runtime.schedules))
        if not self.runtime.schedules:
            logger.warning("the app declares no schedules (app.schedule): nothing to fire")
        try:
            while not self._stopping:
                delay = self.max_sleep
                try:
                    delay = await self.tick()
                except ConveyorError as exc:  # backend down: keep trying
                    logger.warning("scheduler: %s: %s", type(exc).__name__, exc)
                    self.runtime.events.emit("error", error=exc, where="scheduler")
                except Exception as exc:  # a bug: say so loudly, keep scheduling
                    logger.exception("scheduler: unexpected error")
                    self.runtime.events.emit("error", error=exc, where="scheduler")
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), delay)
        finally:
            if self.install_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            logger.info("scheduler stopped (%d fire(s) enqueued)", self.fired)

    def _on_signal(self, sig: signal.Signals) -> None:
        logger.info("%s received: stopping the scheduler", sig.name)
        self.stop()

    # -- one look ---------------------------------------------------------------
    async def sync(self) -> list[ScheduleRecord]:
        """Store the declared schedules; forget stored ones the app no longer declares."""
        backend = await self.runtime.connect()
        specs = list(self.runtime.schedules.values())
        stored = {record.name: record for record in await backend.list_schedules()}
        gone = [name for name in stored if name not in self.runtime.schedules]
        if gone:
            await backend.delete_schedules(gone)
            logger.info("removed schedule(s) no longer declared: %s", ", ".join(sorted(gone)))
        now = await backend.now()
        first = {}
        for spec in specs:
            fires = stored[spec.name].fires if spec.name in stored else 0
            first[spec.name] = timetable(spec, spec.cron, spec.every).first(now, fires)
        records = await backend.sync_schedules(specs, first)
        self._synced = True
        return records

    async def tick(self) -> float:
        """Fire every due slot once; returns how long to sleep before the next look."""
        backend = await self.runtime.connect()
        if not self._synced:
            await self.sync()
        now = await backend.now()
        records = await backend.list_schedules()
        declared = self.runtime.schedules
        if not declared.keys() <= {record.name for record in records}:
            records = await self.sync()  # deleted meanwhile (an operator, an old deploy)
        wake = now + self.max_sleep
        for record in records:
            if record.name not in declared or record.paused or record.next_fire_at is None:
                continue
            upcoming: float | None = record.next_fire_at
            if record.next_fire_at <= now:
                try:
                    upcoming = await self._fire_due(backend, record, now)
                except Exception as exc:  # this schedule only; the next look retries
                    if isinstance(exc, ConveyorError):
                        logger.warning("schedule %r: could not fire: %s", record.name, exc)
                    else:
                        logger.exception("schedule %r: could not fire", record.name)
                    self.runtime.events.emit("error", error=exc, where=f"schedule {record.name}")
                    upcoming = None
            if upcoming is not None:
                wake = min(wake, upcoming)
        return max(0.0, wake - now)

    async def _fire_due(self, backend: Backend, record: ScheduleRecord, now: float) -> float | None:
        """Fire the due slots of one schedule; returns its next slot, or ``None``
        when another scheduler moved it first (look again soon)."""
        table = Timetable.of(record)
        slot, fires = record.next_fire_at, record.fires
        for _ in range(FIRES_PER_LOOK):
            if slot is None or slot > now:
                return slot
            missed = now - slot > self.misfire_grace
            if missed and record.spec.misfire is MisfirePolicy.SKIP:
                following = table.first(now, fires)
                if not await backend.advance_schedule(record.name, slot, following, fired=False):
                    return None
                logger.warning(
                    "schedule %r: skipped missed slots from %s (misfire=skip)",
                    record.name,
                    fire_time_text(slot, False),
                )
                self.runtime.events.emit(
                    "schedule_missed", schedule=record.name, missed_from=slot, next_fire=following
                )
                slot = following
                continue
            job = await self._enqueue(record, table, slot, catch_up=missed)
            following = table.first(now, fires + 1) if missed else table.after_fire(slot, fires + 1)
            if not await backend.advance_schedule(record.name, slot, following):
                return None
            if not job.duplicate:
                self.fired += 1
                self.runtime.events.emit(
                    "schedule_fired", schedule=record.name, job=job, fire_time=slot, catch_up=missed
                )
            fires += 1
            slot = following
        return slot

    async def _enqueue(
        self, record: ScheduleRecord, table: Timetable, slot: float, catch_up: bool
    ) -> Job:
        options = dict(serialization.loads(record.spec.options))
        fire_time = table.fire_text(slot)
        metadata = {**options.pop("metadata", {}), "schedule": record.name, "fire_time": fire_time}
        key = table.fire_key(record.name, slot)
        if catch_up:
            metadata["catch_up"] = True
        payload = serialization.loads(record.spec.payload)
        return await self.runtime.enqueue(
            record.spec.task, payload, idempotency_key=key, metadata=metadata, **options
        )

"""A worker's start and stop, each done once per run: starting its side roles
(the first heartbeat, the supervised roles, maintenance, direct handoff), the
signals, and the two-phase shutdown (both phases: worker.py's module doc)."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import TYPE_CHECKING

from conveyor.errors import BackendError
from conveyor.maintenance.periodic import every
from conveyor.maintenance.retention import RetentionCleaner, retention_rules
from conveyor.maintenance.stalls import StallReaper
from conveyor.worker.handoffs import HandoffReceiver
from conveyor.worker.heartbeat import Heartbeat
from conveyor.worker.looplag import LoopWatchdog
from conveyor.worker.memory import MemoryWatch

if TYPE_CHECKING:
    from conveyor.backends.base import Backend
    from conveyor.worker.worker import Worker

logger = logging.getLogger("conveyor.worker")


def on_signal(worker: Worker, signum: int) -> None:
    """SIGTERM/SIGINT: the first begins the graceful shutdown, a second forces it."""
    worker.signals_seen += 1
    if worker.signals_seen == 1:
        logger.info(
            "%s received: finishing running jobs (signal again to force)",
            signal.Signals(signum).name,
        )
        worker.stop()
    else:
        logger.warning("second signal: cancelling running jobs and releasing them")
        worker.stop(force=True)


async def start_side_roles(worker: Worker, backend: Backend) -> None:
    """Send the first heartbeat, then start every side role under supervision."""
    runtime, settings, roles = worker.runtime, worker.settings, worker.roles
    heartbeat = Heartbeat(backend, worker.describe, settings.heartbeat_interval)
    await heartbeat.beat()
    roles.start("acker", worker.acker.run())
    roles.start("leases", worker.leases.run())
    roles.start("heartbeat", heartbeat.run())
    roles.start("stats", worker.stats.run())
    watchdog = LoopWatchdog(settings.lease, worker.active.keys)
    roles.start("loop watchdog", watchdog.run())
    if settings.max_worker_rss is not None:
        worker.memory = MemoryWatch(settings.max_worker_rss, worker.stop)
        roles.may_end("memory")  # it returns once it has stopped the worker
        roles.start("memory", worker.memory.run())
    if worker.maintenance:
        reaper = StallReaper(backend, runtime.events, settings.max_stalled)
        cleaner = RetentionCleaner(
            backend,
            retention_rules(settings, runtime.tasks.values()),
            settings.stats_retention,
        )
        if worker.burst:
            await reaper.run_once()
        else:
            roles.start(
                "stall reaper",
                every(settings.stall_interval, reaper.run_once, "stall reaper"),
            )
            roles.start(
                "retention",
                every(settings.cleanup_interval, cleaner.run_once, "retention"),
            )
    # Enqueues claim for this worker while it is idle: it gets new work
    # without a claim round trip. Caps and rate limits are per claim, so
    # a stored request would go stale: those workers are woken instead.
    worker.hands_off = (
        backend.hands_off
        and not worker.burst
        and not worker.capped
        and not worker.rate_limited
        and not worker.key_capped
        and not worker.key_rate_limited
    )
    if worker.hands_off:
        handoffs = HandoffReceiver(backend, worker.id, settings.lease, worker.take)
        worker.handoffs = handoffs
        handoffs.started(roles.start("handoffs", handoffs.run()))


async def shut_down(worker: Worker) -> None:
    """Stop claiming, give the buffer back, let running jobs finish (phase one),
    then interrupt what still runs (phase two), store every outcome and leave."""
    settings = worker.settings
    worker.stopping = True
    worker.roles.may_end("handoffs")
    if worker.handoffs is not None:
        await worker.handoffs.end()
    worker.release_buffered()
    worker.buffer_given_back = True
    if worker.active and not worker.forced.is_set():
        logger.info(
            "waiting up to %.0fs for %d running job(s)",
            settings.shutdown_timeout,
            len(worker.active),
        )
        all_done = asyncio.ensure_future(asyncio.wait(set(worker.executing)))
        forced = asyncio.ensure_future(worker.forced.wait())
        await asyncio.wait(
            [all_done, forced],
            timeout=settings.shutdown_timeout,
            return_when=asyncio.FIRST_COMPLETED,
        )
        all_done.cancel()
        forced.cancel()
    if worker.active:
        logger.warning(
            "shutdown deadline: releasing %d running job(s) back to waiting", len(worker.active)
        )
    for run in list(worker.active.values()):
        run.interrupt("shutdown")
    if worker.executing:
        await asyncio.wait(set(worker.executing), timeout=5)
    await worker.acker.drain_at_exit()
    await worker.stats.flush_at_exit()
    await worker.roles.cancel_all()
    try:
        await worker.runtime.backend.remove_worker(worker.id)
    except (BackendError, OSError) as exc:
        logger.warning("could not remove heartbeat: %s", exc)
    await worker.executor.close()
    worker.runtime.events.emit("worker_stopped", worker_id=worker.id)
    await worker.runtime.events.flush()

"""One consistent read of what health checks and metrics report: counts per
queue and state, oldest waiting ages, workers and dead letters."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from conveyor.backends.base import WorkerInfo

if TYPE_CHECKING:
    from conveyor.app import Conveyor


@dataclass(slots=True)
class QueueSnapshot:
    now: float
    counts: dict[str, dict[str, int]]
    oldest_waiting_s: dict[str, float]
    workers: list[tuple[WorkerInfo, bool]] = field(default_factory=list)

    @property
    def alive_workers(self) -> int:
        return sum(1 for _, alive in self.workers if alive)

    def dead_letters(self) -> dict[str, int]:
        return {queue: states.get("failed", 0) for queue, states in self.counts.items()}


async def read_snapshot(app: Conveyor) -> QueueSnapshot:
    backend = await app.connect()
    now, counts, oldest, workers = await asyncio.gather(
        backend.now(), backend.queue_counts(), backend.oldest_waiting(), app.workers()
    )
    ages = {queue: max(0.0, now - run_at) for queue, run_at in oldest.items()}
    return QueueSnapshot(now, counts, ages, workers)

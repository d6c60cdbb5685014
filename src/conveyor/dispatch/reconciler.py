"""The reconciler: due jobs published longer than ``reconcile_after`` ago and
still unclaimed may have lost their message (a lost publish, a broker restarted
without it, a purged queue). It marks them undispatched so the relay publishes
them again. Idempotent: a duplicate message claims nothing and is acknowledged."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from conveyor.dispatch.counts import DispatchCounts
from conveyor.errors import BackendError

if TYPE_CHECKING:
    from conveyor.backends.dispatchstore import DispatchStore

logger = logging.getLogger("conveyor.dispatch")

BATCH = 1000


class Reconciler:
    def __init__(
        self,
        store: DispatchStore,
        reconcile_after: float,
        on_found: Callable[[], None],
        counts: DispatchCounts | None = None,
    ) -> None:
        self.store = store
        self.reconcile_after = reconcile_after
        self.on_found = on_found
        self.counts = counts if counts is not None else DispatchCounts()

    @property
    def reconciled(self) -> int:
        """Due jobs found without their message and given to the relay again."""
        return self.counts.total("message", "reconciled")

    async def run_once(self) -> int:
        total = 0
        while True:
            found = await self.store.reconcile(self.reconcile_after, BATCH)
            total += found
            if found < BATCH:
                break
        if total:
            self.counts.add("message", "reconciled", total)
            logger.info("reconciler: %d due jobs had no message: republishing", total)
            self.on_found()
        return total

    async def run(self) -> None:
        interval = max(0.5, self.reconcile_after / 2)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.run_once()
            except (BackendError, OSError) as exc:
                logger.warning("reconciler failed: %s", exc)

"""Fault injection for the chaos tests. Not for production use.

``CONVEYOR_FAULT_KILL_AFTER_EFFECT=<task name>`` makes a worker SIGKILL itself
after a first attempt of that task has run (its effect is done) and before its
completion is stored: a crash in the acknowledgement window. Outcomes of other
jobs already handed to the acker are stored first, so only the faulted job is
left to stall recovery and runs exactly twice.

The variable is read once, when the worker starts; unset (the default), the
worker's methods are left untouched and the hook costs nothing.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from conveyor.backends.base import Outcome, Settlement

if TYPE_CHECKING:
    from conveyor.worker.running import Running
    from conveyor.worker.worker import Worker

KILL_AFTER_EFFECT = "CONVEYOR_FAULT_KILL_AFTER_EFFECT"

logger = logging.getLogger("conveyor.worker")


def install(worker: Worker) -> None:
    """Wrap ``worker.executor.execute`` when a fault is asked for; else nothing."""
    task = os.environ.get(KILL_AFTER_EFFECT)
    if not task:
        return
    execute: Callable[[Running], Awaitable[Settlement | None]] = worker.executor.execute

    async def execute_then_die(run: Running) -> Settlement | None:
        settlement = await execute(run)
        job = run.job
        if (
            settlement is not None
            and settlement.outcome is Outcome.COMPLETE
            and job.task == task
            and job.attempts == 1
        ):
            # Store every outcome reported before this one, then die with this
            # one unsent: the job's slot is still held, so nothing new starts.
            await worker.acker.drain(10.0)
            logger.warning("fault injection: killing worker after the effect of job %s", job.id)
            os.kill(os.getpid(), signal.SIGKILL)
        return settlement

    logger.warning("fault injection on: %s=%s", KILL_AFTER_EFFECT, task)
    setattr(worker.executor, "execute", execute_then_die)  # noqa: B010  # an instance override

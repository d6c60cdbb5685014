"""What the acker learns from a settle call, told as log lines and events."""

from __future__ import annotations

import logging

from conveyor.backends.base import CircuitInfo, CircuitState
from conveyor.events import EventBus
from conveyor.job import Job

logger = logging.getLogger("conveyor.worker")


class SettleReports:
    def __init__(self, events: EventBus) -> None:
        self._events = events

    def refused(self, job_ids: set[str]) -> None:
        shown = ", ".join(sorted(job_ids)[:10]) + (" …" if len(job_ids) > 10 else "")
        logger.warning(
            "%d outcome(s) refused: their lease had moved on to another claim (%s)",
            len(job_ids),
            shown,
        )

    def cancelled(self, jobs: list[Job]) -> None:
        """A retry or release that a pending cancel turned into ``cancelled``."""
        for job in jobs:
            self._events.emit("cancelled", job=job)

    def circuits(self, changes: list[CircuitInfo]) -> None:
        for circuit in changes:
            if circuit.state is CircuitState.CLOSED:
                logger.info("circuit of task %s closed", circuit.task)
                self._events.emit("circuit_closed", task=circuit.task, circuit=circuit)
            else:
                logger.warning(
                    "circuit of task %s opened after %d failures: its jobs wait until it closes",
                    circuit.task,
                    circuit.failures,
                )
                self._events.emit("circuit_opened", task=circuit.task, circuit=circuit)

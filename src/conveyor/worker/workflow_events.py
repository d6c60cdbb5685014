"""``workflow_completed`` / ``workflow_failed``: told by the worker whose stored
outcome finished the last unfinished job of a workflow.

Nothing of this runs unless someone listens to one of the two events, and then
only for jobs of a workflow: after a settle call, one count of the workflow's
unfinished jobs per workflow touched (and at its end, up to two more counts to
tell its state). Two workers that finish a workflow's last two jobs at the same
moment may both tell it: a listener should be idempotent.
"""

from __future__ import annotations

import logging

from conveyor.backends.base import Backend, JobFilter, Outcome, Settlement, SettleResult
from conveyor.errors import BackendError
from conveyor.events import EventBus
from conveyor.job import TERMINAL_STATES, Job, JobState
from conveyor.workflow import WorkflowState

logger = logging.getLogger("conveyor.worker")

UNFINISHED = [state for state in JobState if state not in TERMINAL_STATES]
_FINAL_OUTCOMES = frozenset({Outcome.COMPLETE, Outcome.FAIL, Outcome.CANCEL})


class WorkflowWatch:
    def __init__(self, backend: Backend, events: EventBus) -> None:
        self._backend = backend
        self._events = events

    def wanted(self) -> bool:
        return self._events.has("workflow_completed") or self._events.has("workflow_failed")

    async def settled(self, batch: list[tuple[Settlement, Job]], result: SettleResult) -> None:
        """After ``batch`` was stored: tell the workflows it finished."""
        if not self.wanted():
            return
        last_of: dict[str, Job] = {}
        for settlement, job in batch:
            workflow_id = job.workflow_id
            if workflow_id is None or settlement.job_id in result.refused:
                continue
            if settlement.outcome in _FINAL_OUTCOMES or settlement.job_id in result.cancelled:
                last_of[workflow_id] = job
        for workflow_id, job in last_of.items():
            try:
                state = await self.ended(workflow_id)
            except (BackendError, OSError) as exc:
                logger.warning("could not read the state of workflow %s: %s", workflow_id, exc)
                continue
            if state is WorkflowState.COMPLETED:
                self._events.emit("workflow_completed", workflow_id=workflow_id, job=job)
            elif state is not None:
                self._events.emit(
                    "workflow_failed", workflow_id=workflow_id, state=state.value, job=job
                )

    async def ended(self, workflow_id: str) -> WorkflowState | None:
        """How the workflow ended, or ``None`` while a job of it is unfinished."""
        count = self._backend.count_jobs
        if await count(JobFilter(workflow_id=workflow_id, states=UNFINISHED)):
            return None
        if await count(JobFilter(workflow_id=workflow_id, states=[JobState.FAILED])):
            return WorkflowState.FAILED
        if await count(JobFilter(workflow_id=workflow_id, states=[JobState.CANCELLED])):
            return WorkflowState.CANCELLED
        return WorkflowState.COMPLETED

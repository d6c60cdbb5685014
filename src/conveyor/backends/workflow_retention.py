"""Retention for the jobs of a workflow: they go together or not at all.

A job of a workflow is never pruned alone (a later step reads its result, and
the workflow's page lists every step). A workflow is pruned whole when none of
its jobs is live and each one is due under the rule for its state and task,
judged as for a plain job: finished before ``now - max_age``, or older than
the ``max_count`` newest jobs of its rule. Each backend gathers the finished
workflows' rows and each count rule's :class:`Threshold`; the decision is here,
the same for all of them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from conveyor.backends.operations import PruneRule
from conveyor.job import TERMINAL_STATES, JobState

#: How many finished workflows a backend reads and decides on at once.
WORKFLOW_CHUNK = 200


@dataclass(frozen=True, slots=True)
class WorkflowRow:
    """One job of a workflow, as much as the decision needs."""

    workflow_id: str
    id: str
    state: JobState
    task: str
    finished_at: float | None


@dataclass(frozen=True, slots=True)
class Threshold:
    """Where a count rule starts deleting: jobs older than ``newest_kept``
    (``(finished_at, id)``, the oldest of the ``max_count`` kept) are due;
    ``None`` when the rule keeps none (``max_count`` 0: every job is due)."""

    newest_kept: tuple[float, str] | None


def covers(rule: PruneRule, state: JobState, task: str) -> bool:
    """True when ``rule`` is the rule for a job in ``state`` of ``task``."""
    if rule.state is not state or state not in TERMINAL_STATES:
        return False
    return task == rule.task if rule.task is not None else task not in rule.exclude_tasks


def is_due(
    row: WorkflowRow,
    rules: Sequence[PruneRule],
    now: float,
    thresholds: Sequence[Threshold | None],
) -> bool:
    """True when some rule would delete ``row`` if it were a plain job.
    ``thresholds[i]`` is rule ``i``'s (None: no count, or fewer jobs than it keeps)."""
    if row.finished_at is None:
        return False
    for rule, threshold in zip(rules, thresholds, strict=True):
        if not covers(rule, row.state, row.task):
            continue
        if rule.max_age is not None and row.finished_at < now - rule.max_age:
            return True
        if threshold is not None and (
            threshold.newest_kept is None or (row.finished_at, row.id) < threshold.newest_kept
        ):
            return True
    return False


def due_workflows(
    rows: Iterable[WorkflowRow],
    rules: Sequence[PruneRule],
    now: float,
    thresholds: Sequence[Threshold | None],
) -> set[str]:
    """The workflows (of those ``rows`` list completely) whose every job is
    terminal and due: the ones to delete whole."""
    verdict: dict[str, bool] = defaultdict(lambda: True)
    for row in rows:
        verdict[row.workflow_id] &= row.state in TERMINAL_STATES and is_due(
            row, rules, now, thresholds
        )
    return {workflow_id for workflow_id, due in verdict.items() if due}


def threshold_of(rule: PruneRule, newest_kept: tuple[float, str] | None) -> Threshold | None:
    """Rule ``rule``'s threshold, given the ``max_count``-th newest job of its
    scope (None when it has fewer)."""
    if rule.max_count is None:
        return None
    if rule.max_count <= 0:
        return Threshold(None)
    return None if newest_kept is None else Threshold(newest_kept)

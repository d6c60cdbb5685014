"""The retention cleaner: deletes completed, failed and cancelled jobs past
their task's ``keep_completed`` / ``keep_failed`` (a count or an age)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from conveyor.backends.base import Backend, PruneRule
from conveyor.job import JobState

if TYPE_CHECKING:
    from conveyor.settings import Settings
    from conveyor.task import Task


def _rule(
    state: JobState,
    keep: int | float | None,
    task: str | None = None,
    exclude: tuple[str, ...] = (),
) -> PruneRule | None:
    if keep is None:
        return None
    if isinstance(keep, int):
        return PruneRule(state, max_count=keep, task=task, exclude_tasks=exclude)
    return PruneRule(state, max_age=keep, task=task, exclude_tasks=exclude)


def retention_rules(settings: Settings, tasks: Iterable[Task]) -> list[PruneRule]:
    """Per-task rules for tasks with their own setting, app-wide rules for the rest.
    Cancelled jobs follow ``keep_completed``."""
    tasks = list(tasks)
    rules: list[PruneRule] = []
    for state, attr, default in (
        (JobState.COMPLETED, "keep_completed", settings.keep_completed),
        (JobState.CANCELLED, "keep_completed", settings.keep_completed),
        (JobState.FAILED, "keep_failed", settings.keep_failed),
    ):
        custom: list[str] = []
        for task in tasks:
            if getattr(task.options, f"{attr}_set"):
                custom.append(task.name)
                rule = _rule(state, getattr(task.options, attr), task=task.name)
                if rule:
                    rules.append(rule)
        rule = _rule(state, default, exclude=tuple(custom))
        if rule:
            rules.append(rule)
    return rules


#: Heartbeat rows of workers not seen for this long are removed (crashed workers
#: never remove their own); until then ``conveyor workers --all`` shows them dead.
FORGET_WORKERS_AFTER = 3600.0


class RetentionCleaner:
    def __init__(self, backend: Backend, rules: list[PruneRule], stats_retention: float) -> None:
        self._backend = backend
        self._rules = rules
        self._stats_retention = stats_retention

    async def run_once(self) -> int:
        backend = self._backend
        await backend.prune_workers(FORGET_WORKERS_AFTER)
        deleted = await backend.prune_jobs(self._rules)
        await backend.prune_job_stats(self._stats_retention)
        return deleted

"""``Backend.update_schedule``'s arguments as one value, and that signature
written once for the backends that take the value (SQLite, PostgreSQL).

The contract (base.py) keeps its keyword arguments; a backend that mixes in
:class:`UpdateScheduleByChange` implements ``apply_schedule_change`` instead,
so the six arguments are not spelled out again in each backend and module.
"""

from __future__ import annotations

import abc
import dataclasses

from conveyor.backends.base import ScheduleRecord


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleChange:
    """The arguments of ``Backend.update_schedule`` (see base.py for their meaning)."""

    name: str
    paused: bool | None = None
    cron: str | None = None
    every: float | None = None
    next_fire_at: float | None = None
    reschedule: bool = False

    @property
    def sets_expression(self) -> bool:
        """A new cron or every overrides the stored expression (and clears the other)."""
        return self.cron is not None or self.every is not None


class UpdateScheduleByChange(abc.ABC):
    """``update_schedule`` as one :class:`ScheduleChange` handed to the backend."""

    async def update_schedule(
        self,
        name: str,
        *,
        paused: bool | None = None,
        cron: str | None = None,
        every: float | None = None,
        next_fire_at: float | None = None,
        reschedule: bool = False,
    ) -> ScheduleRecord | None:
        change = ScheduleChange(name, paused, cron, every, next_fire_at, reschedule)
        return await self.apply_schedule_change(change)

    @abc.abstractmethod
    async def apply_schedule_change(self, change: ScheduleChange) -> ScheduleRecord | None:
        """Apply an operator's change; ``None`` when no schedule has that name."""

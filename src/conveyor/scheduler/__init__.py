"""Schedules: cron and interval timing (pure), the firing service, the admin API."""

from conveyor.scheduler.scheduler import Scheduler

__all__ = ["Scheduler"]

"""Job timeouts: one loop timer for every running job instead of one each.

A timer per job (``loop.call_at`` and its ``cancel``) cost about 3.6 µs of the
~26 µs a worker spends on a no-op job. Here a deadline is a dict entry; one
timer is armed for the earliest, and when it fires it interrupts the runs past
theirs and re-arms for the next. A run that finished has left the dict, so a
timer that fires for it only re-arms: with one timeout for all jobs, the
earliest deadline only moves when the timer fires.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from conveyor.worker.running import StopReason


class Running(Protocol):
    """What a deadline interrupts: one job's run, or a whole batch (batching.py)."""

    def interrupt(self, reason: StopReason) -> None: ...


#: A deadline this close to the firing time counts as reached: libuv (uvloop)
#: keeps time in milliseconds, so its timers may fire up to one early. A run
#: whose deadline follows another's within it is interrupted with that one.
_SLACK = 0.001


class Deadlines:
    def __init__(self) -> None:
        self._due: dict[Running, float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None

    def __len__(self) -> int:
        return len(self._due)

    def add(self, run: Running, timeout: float) -> None:
        """Interrupt ``run`` with "timeout" ``timeout`` seconds from now, unless
        it is discarded first."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a timer of another loop would never fire here
            self.close()
            self._loop = loop
        deadline = loop.time() + timeout
        self._due[run] = deadline
        if self._timer is None or deadline < self._armed_for:
            self._arm(loop, deadline)

    def discard(self, run: Running) -> None:
        self._due.pop(run, None)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._due.clear()

    def _arm(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_for = deadline
        self._timer = loop.call_at(deadline, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time() + _SLACK
        expired = [run for run, deadline in self._due.items() if deadline <= now]
        for run in expired:
            del self._due[run]
        if self._due:
            self._arm(loop, min(self._due.values()))
        for run in expired:
            run.interrupt("timeout")

"""How many claimed jobs a worker holds beyond its slots (its buffer).

The default adapts: after each claim that came back full, the buffer holds
what the worker completes during two claim round trips (a refill starts when
half of it is gone; the other half must last until the refill arrives), from
moving averages of a claim's round trip and of the runs completed per second,
between half the slots and twice as many. 50 ms jobs at ``-c 50`` with a 1 ms
claim need 2 jobs (the base, 25, holds); no-op jobs need hundreds (the
ceiling). A prefetch the user set stays fixed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Weight of the newest sample in the moving averages.
_WEIGHT = 0.2


def resolve_prefetch(setting: int | None, concurrency: int) -> int:
    """``None`` (the default) means half the worker's slots: enough to cover a claim
    round trip at full load (measured), and 0 for a single-slot worker, which keeps
    strict priority order and never takes a waiting job down with a crashing one."""
    return concurrency // 2 if setting is None else setting


class Prefetch:
    """The buffer's size now (``size``), fed by the worker's claims and completions."""

    def __init__(
        self,
        setting: int | None,
        concurrency: int,
        rate_limited: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base = self.size = resolve_prefetch(setting, concurrency)
        # Fixed at the base for a prefetch the user set, a single-slot worker,
        # and with rate limits: they are counted at claim, so a big buffer would
        # start jobs claimed in one window in the next, on top of its own.
        adaptive = setting is None and self.base > 0 and not rate_limited
        self.ceiling = 2 * concurrency if adaptive else self.base
        self._claim_time = 0.0  # seconds, moving average
        self._done_rate = 0.0  # completed runs per second, moving average
        self._done = 0  # completed since the last claim came back
        self._clock = clock
        self._since = clock()

    def completed(self, count: int = 1) -> None:
        """A run (or ``count``) completed. Failures are not counted: they can be
        instant (a downstream outage) and say nothing about how long jobs take."""
        self._done += count

    def after_claim(self, claim_time: float, full: bool) -> None:
        """A claim came back after ``claim_time`` seconds, ``full`` or short. A
        short one (the queue ran dry) starts over at the base: the next burst
        may be long jobs, which a big buffer would hoard."""
        now = self._clock()
        span, self._since = now - self._since, now
        done, self._done = self._done, 0
        if self.ceiling == self.base:
            return
        self._claim_time += (claim_time - self._claim_time) * _WEIGHT
        if not full:
            self.size, self._done_rate = self.base, 0.0
            return
        if span > 0:
            self._done_rate += (done / span - self._done_rate) * _WEIGHT
        needed = 2 * self._claim_time * self._done_rate
        self.size = int(min(self.ceiling, max(self.base, needed)))

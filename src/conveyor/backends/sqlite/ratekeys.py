"""Rate limits per key in a SQLite claim (``ClaimRequest.key_rate_limits``): the
sliding windows of starts per ``(task, rate_limit_key)`` in ``rate_key_starts``,
read and written inside the claim's write transaction, so claimers on every
connection and process see each other's starts.

A window is read the first time the claim meets one of its jobs; a spent one
goes into ``spent`` (the candidate query leaves its jobs out), so the walk
passes it and claims the keys behind it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence

from conveyor.backends.sqlite.decode import RATE_LIMIT_KEY, Row
from conveyor.backends.sqlite.queries import Q
from conveyor.ratelimit import RateLimit

#: A rate window: (task, rate_limit_key).
Window = tuple[str, str | None]


class RateKeyWindows:
    """The windows one claim meets, their starts counted as it goes."""

    def __init__(
        self, conn: sqlite3.Connection, rates: Mapping[str, RateLimit], now: float
    ) -> None:
        self._conn = conn
        self._rates = rates
        self._now = now
        self._used: dict[Window, int] = {}
        self.spent: set[Window] = set()
        for task, rate in rates.items():
            conn.execute(Q.rate_key_trim, {"task": task, "since": now - rate.period})

    def limits(self, task: str) -> bool:
        return task in self._rates

    def has_room(self, task: str, key: str | None) -> bool:
        """``(task, key)``'s window takes one more start (a spent one is noted)."""
        window = (task, key)
        used = self._used.get(window)
        if used is None:
            since = self._now - self._rates[task].period
            (used,) = self._conn.execute(
                Q.rate_key_used, {"task": task, "key": key, "since": since}
            ).fetchone()
            self._used[window] = used = int(used)
        if used >= self._rates[task].limit:
            self.spent.add(window)
            return False
        return True

    def take(self, task: str, key: str | None) -> None:
        """Count one start in the window (after :meth:`has_room` said yes)."""
        window = (task, key)
        used = self._used[window] + 1
        self._used[window] = used
        if used >= self._rates[task].limit:
            self.spent.add(window)

    def record(self, rows: Sequence[Row]) -> None:
        """Log the starts of the claimed ``rows`` in their windows."""
        started: dict[Window, int] = {}
        for row in rows:
            task = row[1]
            if task in self._rates:
                window = (task, row[RATE_LIMIT_KEY])
                started[window] = started.get(window, 0) + 1
        if started:
            self._conn.executemany(
                Q.rate_key_record,
                [
                    (task, key, self._now, n, self._rates[task].period)
                    for (task, key), n in started.items()
                ],
            )

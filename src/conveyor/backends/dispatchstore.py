"""What RabbitMQ dispatch (conveyor.dispatch) needs from a SQL store, whichever
it is: the relay takes and marks due jobs and gives back what the broker did not
confirm, the reconciler undispatches jobs whose message went missing, the
dead-letter handler fails a job ``expired`` (fenced), the counts keep running
totals, and the relay sleeps on the store's own wake-up. PostgreSQL
(backends/postgres/dispatch.py) and SQLite (backends/sqlite/dispatch.py) keep
it; the dispatch record is the job row's ``dispatched_at`` in both, so an
enqueue writes it in the job's own transaction."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from conveyor.job import Job


@dataclasses.dataclass(frozen=True, slots=True)
class Dispatchable:
    """A due job to publish: its id, queue, expiry and the dispatch stamp."""

    id: str
    queue: str
    expires_at: float | None
    stamp: float


class RelayWakeups(Protocol):
    """The store's signal that work was committed, for an idle relay."""

    @property
    def connected(self) -> bool: ...

    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...


class DispatchStore(Protocol):
    async def ensure_index(self) -> None: ...

    async def take(self, limit: int, min_age: float = 0.0) -> list[Dispatchable]:
        """Mark up to ``limit`` undispatched jobs due for ``min_age`` seconds or
        more dispatched, oldest first."""
        ...

    async def untake(self, items: Sequence[Dispatchable]) -> None: ...

    async def reconcile(self, older_than: float, limit: int) -> int: ...

    async def expire(self, job_id: str, stamp: float, message: str) -> Job | None: ...

    async def lag(self) -> float: ...

    async def add_counts(self, counts: Mapping[tuple[str, str], int]) -> None: ...

    async def counts(self) -> dict[tuple[str, str], int]: ...

    async def next_due(self) -> float | None: ...

    def wakeups(self, on_wake: Callable[[], None]) -> RelayWakeups: ...

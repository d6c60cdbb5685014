"""DispatchCounts: one count goes out as a ``dispatch`` event and into the
totals the store is sent, kept for the next flush when the store fails."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from conveyor.dispatch.counts import DispatchCounts
from conveyor.errors import BackendUnavailable
from conveyor.events import EventBus


class Store:
    def __init__(self) -> None:
        self.totals: dict[tuple[str, str], int] = {}
        self.down = False

    async def add_counts(self, counts: Mapping[tuple[str, str], int]) -> None:
        if self.down:
            raise BackendUnavailable("store down")
        for key, n in counts.items():
            self.totals[key] = self.totals.get(key, 0) + n


async def test_a_count_is_an_event_and_flushed_once() -> None:
    events = EventBus()
    seen: list[dict[str, Any]] = []
    events.on("dispatch", lambda event, **data: seen.append(data))
    counts = DispatchCounts(events)
    counts.add("message", "published", 3)
    counts.add("message", "confirmed", 3)
    counts.add("dead_letter", "expired")
    counts.add("message", "returned", 0)  # nothing happened: no event
    assert seen == [
        {"kind": "message", "outcome": "published", "count": 3},
        {"kind": "message", "outcome": "confirmed", "count": 3},
        {"kind": "dead_letter", "outcome": "expired", "count": 1},
    ]
    store = Store()
    await counts.flush(store)  # type: ignore[arg-type]
    await counts.flush(store)  # type: ignore[arg-type]
    assert store.totals == {
        ("message", "published"): 3,
        ("message", "confirmed"): 3,
        ("dead_letter", "expired"): 1,
    }
    assert counts.total("message", "confirmed") == 3


async def test_counts_the_store_refused_go_with_the_next_flush() -> None:
    counts = DispatchCounts()
    store = Store()
    counts.add("message", "reconciled", 2)
    store.down = True
    with pytest.raises(BackendUnavailable):
        await counts.flush(store)  # type: ignore[arg-type]
    counts.add("message", "reconciled")
    store.down = False
    await counts.flush(store)  # type: ignore[arg-type]
    assert store.totals == {("message", "reconciled"): 3}


def test_an_unknown_outcome_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown dispatch outcome"):
        DispatchCounts().add("message", "lost")

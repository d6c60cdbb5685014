"""The event bus: known names only, isolation of failing callbacks, async callbacks."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from conveyor.app import Conveyor
from conveyor.events import EVENT_NAMES, EventBus

SPEC_EVENTS = {
    "enqueued",
    "active",
    "progress",
    "completed",
    "failed",
    "retrying",
    "dead",
    "expired",
    "stalled",
    "cancelled",
    "circuit_opened",
    "circuit_closed",
    "worker_started",
    "worker_stopped",
    "error",
}


#: Beyond SPEC §3's list: the scheduler's own (docs/reference/events.md).
SCHEDULER_EVENTS = {"schedule_fired", "schedule_missed"}
#: Issue 17's, told by the worker that finishes a workflow.
WORKFLOW_EVENTS = {"workflow_completed", "workflow_failed"}
#: The worker's store round trips, timed (``--metrics-port`` reads them).
ROUND_TRIP_EVENTS = {"claimed", "settled", "leases_renewed"}
DISPATCH_EVENTS = {"dispatch"}  # RabbitMQ dispatch's counts (dispatch/counts.py)


def test_event_names_are_the_specs() -> None:
    assert set(EVENT_NAMES) == (
        SPEC_EVENTS | SCHEDULER_EVENTS | WORKFLOW_EVENTS | ROUND_TRIP_EVENTS | DISPATCH_EVENTS
    )


@pytest.mark.parametrize("name", ["complete", "COMPLETED", "", "job.completed", "started"])
def test_unknown_event_name_is_refused(name: str) -> None:
    bus = EventBus()
    with pytest.raises(ValueError, match="unknown event"):
        bus.on(name, lambda *a, **k: None)
    assert not bus.has(name)


def test_app_on_refuses_unknown_names_directly_and_as_decorator() -> None:
    app = Conveyor("memory://")
    with pytest.raises(ValueError, match="unknown event"):
        app.on("finished", lambda *a, **k: None)
    with pytest.raises(ValueError, match="unknown event"):

        @app.on("finished")
        def listener(event: str, **data: Any) -> None: ...


def test_app_on_as_decorator_registers() -> None:
    app = Conveyor("memory://")
    seen: list[Any] = []

    @app.on("completed")
    def listener(event: str, **data: Any) -> None:
        seen.append((event, data))

    app.events.emit("completed", job="j", result=1, duration=0.1)
    assert seen == [("completed", {"job": "j", "result": 1, "duration": 0.1})]


def test_callbacks_run_in_registration_order_with_the_event_name() -> None:
    bus = EventBus()
    calls: list[tuple[str, str, dict[str, Any]]] = []
    bus.on("completed", lambda event, **data: calls.append(("first", event, data)))
    bus.on("completed", lambda event, **data: calls.append(("second", event, data)))
    bus.on("failed", lambda event, **data: calls.append(("other", event, data)))
    bus.emit("completed", job=1)
    assert calls == [("first", "completed", {"job": 1}), ("second", "completed", {"job": 1})]


def test_a_raising_callback_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    bus = EventBus()
    calls: list[str] = []

    def broken(event: str, **data: Any) -> None:
        calls.append("broken")
        raise RuntimeError("listener bug")

    bus.on("dead", lambda event, **data: calls.append("before"))
    bus.on("dead", broken)
    bus.on("dead", lambda event, **data: calls.append("after"))
    with caplog.at_level(logging.ERROR, logger="conveyor.events"):
        bus.emit("dead", job=None)  # must not raise
    assert calls == ["before", "broken", "after"]
    assert "dead" in caplog.text
    assert "listener bug" in caplog.text


def test_emit_without_listeners_is_a_no_op() -> None:
    bus = EventBus()
    assert not bus.has("completed")
    bus.emit("completed", job=None)


def test_off_removes_a_listener() -> None:
    bus = EventBus()
    calls: list[int] = []

    def listener(event: str, **data: Any) -> None:
        calls.append(1)

    bus.on("enqueued", listener)
    assert bus.has("enqueued")
    bus.off("enqueued", listener)
    bus.off("enqueued", listener)  # twice is harmless
    assert not bus.has("enqueued")
    bus.emit("enqueued")
    assert calls == []


async def test_async_callbacks_are_awaited_on_flush() -> None:
    bus = EventBus()
    finished: list[str] = []
    gate = asyncio.Event()

    async def slow(event: str, **data: Any) -> None:
        await gate.wait()
        await asyncio.sleep(0.01)
        finished.append(data["name"])

    bus.on("completed", slow)
    bus.emit("completed", name="a")
    bus.emit("completed", name="b")
    await asyncio.sleep(0)
    assert finished == []  # still running: emit does not block
    gate.set()
    await bus.flush()
    assert sorted(finished) == ["a", "b"]


async def test_a_raising_async_callback_is_logged_and_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = EventBus()
    calls: list[str] = []

    async def broken(event: str, **data: Any) -> None:
        await asyncio.sleep(0)
        raise RuntimeError("async listener bug")

    async def fine(event: str, **data: Any) -> None:
        await asyncio.sleep(0.01)
        calls.append("fine")

    bus.on("failed", broken)
    bus.on("failed", fine)
    bus.on("failed", lambda event, **data: calls.append("sync"))
    with caplog.at_level(logging.ERROR, logger="conveyor.events"):
        bus.emit("failed")
        await bus.flush()
    assert sorted(calls) == ["fine", "sync"]
    assert "async listener bug" in caplog.text


async def test_flush_with_nothing_pending_returns() -> None:
    await asyncio.wait_for(EventBus().flush(), 1)

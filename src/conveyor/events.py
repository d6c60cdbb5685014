"""Events: what happened, for hooks, logs and metrics.

| event | emitted by | data |
| --- | --- | --- |
| ``enqueued`` | app, after the backend accepted the job | ``job`` |
| ``active`` | worker, before the handler runs | ``job``, ``worker_id`` |
| ``progress`` | worker, on ``ctx.progress`` | ``job``, ``progress`` |
| ``completed`` | worker, handler returned | ``job``, ``result``, ``duration`` |
| ``failed`` | worker, an attempt failed | ``job``, ``error``, ``will_retry``, ``duration`` |
| ``retrying`` | worker, the job goes back to delayed | ``job``, ``delay`` |
| ``dead`` | worker / stall reaper / claim, the job ended ``failed`` | ``job``, ``reason`` |
| ``expired`` | claim, a waiting job passed its TTL | ``job`` |
| ``stalled`` | stall reaper, a lease expired | ``job``, ``requeued`` |
| ``cancelled`` | app or worker | ``job`` |
| ``workflow_completed`` | worker, it finished a workflow's last job | ``workflow_id``, ``job`` |
| ``workflow_failed`` | worker, a job failed/cancelled | ``workflow_id``, ``state``, ``job`` |
| ``circuit_opened`` | worker, from the backend's answer | ``task``, ``circuit`` |
| ``circuit_closed`` | worker, from the backend's answer | ``task``, ``circuit`` |
| ``worker_started`` / ``worker_stopped`` | worker | ``worker_id`` |
| ``claimed`` | worker, after each claim round trip | ``worker_id``, ``count``, ``seconds`` |
| ``settled`` | worker, after each batch of outcomes was stored | ``count``, ``seconds`` |
| ``leases_renewed`` | worker, per renewal | ``renewed``, ``lost``, ``seconds``, ``error`` |
| ``schedule_fired`` | scheduler, a slot enqueued | ``schedule``, ``job``, ``fire_time``, ... |
| ``schedule_missed`` | scheduler, slots skipped | ``schedule``, ``missed_from``, ``next_fire`` |
| ``dispatch`` | RabbitMQ dispatch roles (dispatch/counts.py) | ``kind``, ``outcome``, ``count`` |
| ``error`` | any role, on an unexpected exception it survived | ``error``, ``where`` |

Callbacks may be sync or async. They run in registration order; one that
raises is logged and never stops the others or the worker.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("conveyor.events")

EVENT_NAMES = frozenset(
    {
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
        "workflow_completed",
        "workflow_failed",
        "circuit_opened",
        "circuit_closed",
        "worker_started",
        "worker_stopped",
        "claimed",
        "settled",
        "leases_renewed",
        "schedule_fired",
        "schedule_missed",
        "dispatch",
        "error",
    }
)

Callback = Callable[..., Any]


class EventBus:
    def __init__(self) -> None:
        self._listeners: dict[str, list[Callback]] = {}
        self._pending: set[asyncio.Task[Any]] = set()

    def on(self, event: str, callback: Callback) -> Callback:
        if event not in EVENT_NAMES:
            known = ", ".join(sorted(EVENT_NAMES))
            raise ValueError(f"unknown event {event!r} (known: {known})")
        self._listeners.setdefault(event, []).append(callback)
        return callback

    def off(self, event: str, callback: Callback) -> None:
        listeners = self._listeners.get(event, [])
        if callback in listeners:
            listeners.remove(callback)

    def has(self, event: str) -> bool:
        """Cheap check so hot paths build event data only when someone listens."""
        return bool(self._listeners.get(event))

    def emit(self, event: str, **data: Any) -> None:
        for callback in self._listeners.get(event, ()):
            try:
                outcome = callback(event, **data)
                if inspect.isawaitable(outcome):
                    task = asyncio.ensure_future(outcome)
                    self._pending.add(task)
                    task.add_done_callback(self._finished)
            except Exception:
                logger.exception("event callback for %r failed", event)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("event callback failed", exc_info=task.exception())

    async def flush(self) -> None:
        """Wait for async callbacks still running (at shutdown)."""
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

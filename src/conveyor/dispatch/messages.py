"""The dispatch message: a job's id, queue and dispatch stamp, never the only
copy of anything (the job lives in the store). JSON body, persistent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from aio_pika import Message

    from conveyor.backends.dispatchstore import Dispatchable


@dataclass(frozen=True, slots=True)
class Envelope:
    job_id: str
    queue: str
    stamp: float


def encode(item: Dispatchable, now: float) -> Message:
    from aio_pika import DeliveryMode, Message

    body = orjson.dumps({"id": item.id, "queue": item.queue, "stamp": item.stamp})
    expiration = None
    if item.expires_at is not None:
        # The job's own TTL, counted from now: the broker dead-letters the
        # message when it would expire in the store (at least 1 ms).
        expiration = max(0.001, item.expires_at - now)
    return Message(
        body,
        content_type="application/json",
        delivery_mode=DeliveryMode.PERSISTENT,
        message_id=item.id,
        expiration=expiration,
    )


def decode(body: bytes) -> Envelope:
    """Raises ValueError for anything that is not a dispatch message."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    job_id, queue, stamp = data.get("id"), data.get("queue"), data.get("stamp")
    if not isinstance(job_id, str) or not job_id or not isinstance(queue, str):
        raise ValueError("no job id or queue")
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        raise ValueError("no dispatch stamp")
    return Envelope(job_id, queue, float(stamp))


def death_reason(headers: dict[str, Any] | None) -> str:
    """The broker's account of a dead letter, from its first ``x-death`` entry."""
    deaths = (headers or {}).get("x-death")
    if not isinstance(deaths, list) or not deaths or not isinstance(deaths[0], dict):
        return "dead-lettered by the broker (no x-death header)"
    first = deaths[0]
    reason = first.get("reason", "unknown")
    queue = first.get("queue", "?")
    # Worded like the claim's own TTL expiry when the broker's reason is a TTL.
    what = "TTL expired, " if reason == "expired" else ""
    return f"{what}dead-lettered by the broker: x-death reason {reason!r} on queue {queue!r}"

"""The dispatch message: the ids of due jobs of one queue with their dispatch
stamps, never the only copy of anything (the jobs live in the store). One
message per (queue, job expiry) in a relay's batch: a broker message costs the
relay and the worker far more than a job's SQL claim, so it names many jobs.
JSON body, persistent.

Body: ``{"queue": q, "jobs": [[id, stamp], ...]}``. A message of one job in
the earlier form ``{"id", "queue", "stamp"}`` is still read (messages published
before an upgrade)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from aio_pika import Message

    from conveyor.backends.dispatchstore import Dispatchable


@dataclass(frozen=True, slots=True)
class Envelope:
    """The jobs a message names: (job id, dispatch stamp) pairs, one queue."""

    queue: str
    jobs: tuple[tuple[str, float], ...]


def encode(queue: str, items: Sequence[Dispatchable], now: float) -> Message:
    """One message for ``items`` of ``queue``, which share one expiry (the relay
    groups them so): a message's expiration applies to every job it names."""
    from aio_pika import DeliveryMode, Message

    body = orjson.dumps({"queue": queue, "jobs": [[item.id, item.stamp] for item in items]})
    expiration = None
    expires_at = items[0].expires_at
    if expires_at is not None:
        # The jobs' own TTL, counted from now: the broker dead-letters the
        # message when they would expire in the store (at least 1 ms).
        expiration = max(0.001, expires_at - now)
    return Message(
        body,
        content_type="application/json",
        delivery_mode=DeliveryMode.PERSISTENT,
        message_id=items[0].id,
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
    queue = data.get("queue")
    if not isinstance(queue, str):
        raise ValueError("no queue")
    if "jobs" in data:
        pairs = data["jobs"]
        if not isinstance(pairs, list) or not pairs:
            raise ValueError("no jobs")
        return Envelope(queue, tuple(_job(pair) for pair in pairs))
    return Envelope(queue, (_job([data.get("id"), data.get("stamp")]),))


def _job(pair: Any) -> tuple[str, float]:
    if not isinstance(pair, list) or len(pair) != 2:
        raise ValueError("a job is not an [id, stamp] pair")
    job_id, stamp = pair
    if not isinstance(job_id, str) or not job_id:
        raise ValueError("no job id")
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        raise ValueError("no dispatch stamp")
    return job_id, float(stamp)


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

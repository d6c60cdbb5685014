"""The broker's names and queue arguments, and their idempotent declaration.

One durable queue per conveyor queue (``<prefix><queue>``, reached through the
default exchange), worker queues ``<prefix>worker.<id>`` with a message TTL,
all dead-lettering into ``<prefix>dead-letter`` (fanout) and its queue
``<prefix>dead-letters``, kept ``dead_letter_ttl``. Declaring twice with the
same arguments is a no-op; different arguments close the channel
(PRECONDITION_FAILED), so every process must agree on them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from conveyor.durations import parse_duration
from conveyor.errors import ConfigurationError

if TYPE_CHECKING:
    from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractQueue

#: The query options conveyor reads from the dispatch URL; others go to the client.
OPTIONS = (
    "prefix",
    "queue_type",
    "dead_letter_ttl",
    "delivery_limit",
    "reconcile_after",
    "relay_batch",
)


@dataclasses.dataclass(frozen=True, slots=True)
class DispatchOptions:
    url: str
    prefix: str = "conveyor."
    queue_type: Literal["quorum", "classic"] = "quorum"
    dead_letter_ttl: float = 86400.0
    delivery_limit: int = 20
    reconcile_after: float = 60.0
    relay_batch: int = 500

    @property
    def dead_letter_exchange(self) -> str:
        return f"{self.prefix}dead-letter"

    @property
    def dead_letter_queue(self) -> str:
        return f"{self.prefix}dead-letters"

    def queue_name(self, queue: str) -> str:
        return f"{self.prefix}{queue}"

    def queue_arguments(self, queue: str, worker_queue_ttl: float) -> dict[str, Any]:
        args: dict[str, Any] = {
            "x-queue-type": self.queue_type,
            "x-dead-letter-exchange": self.dead_letter_exchange,
        }
        if self.queue_type == "quorum":
            # A message that keeps crashing its consumers is dead-lettered;
            # at-least-once dead-lettering needs reject-publish overflow.
            args["x-delivery-limit"] = self.delivery_limit
            args["x-dead-letter-strategy"] = "at-least-once"
            args["x-overflow"] = "reject-publish"
        if queue.startswith("worker."):
            args["x-message-ttl"] = int(worker_queue_ttl * 1000)
        return args


def parse_dispatch_url(url: str) -> DispatchOptions:
    """Split conveyor's options (``?queue_type=classic&prefix=app.``) off an AMQP URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("amqp", "amqps"):
        raise ConfigurationError(f"dispatch: {url!r} is not an amqp:// URL")
    ours: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        (ours.__setitem__(key, value) if key in OPTIONS else rest.append((key, value)))
    client_url = urlunsplit(parts._replace(query=urlencode(rest)))
    try:
        options = DispatchOptions(
            client_url,
            prefix=ours.get("prefix", "conveyor."),
            queue_type=_queue_type(ours.get("queue_type", "quorum")),
            dead_letter_ttl=parse_duration(ours.get("dead_letter_ttl", "24h")),
            delivery_limit=int(ours.get("delivery_limit", "20")),
            reconcile_after=parse_duration(ours.get("reconcile_after", "60s")),
            relay_batch=int(ours.get("relay_batch", "500")),
        )
    except ValueError as exc:
        raise ConfigurationError(f"dispatch: {exc}") from None
    if options.delivery_limit < 1 or options.relay_batch < 1:
        raise ConfigurationError("dispatch: delivery_limit and relay_batch must be >= 1")
    return options


def _queue_type(value: str) -> Literal["quorum", "classic"]:
    if value == "quorum":
        return "quorum"
    if value == "classic":
        return "classic"
    raise ValueError(f"queue_type must be quorum or classic, not {value!r}")


async def declare_dead_letters(
    channel: AbstractChannel, options: DispatchOptions
) -> tuple[AbstractExchange, AbstractQueue]:
    """The dead-letter exchange and its queue, which keeps letters ``dead_letter_ttl``."""
    from aio_pika import ExchangeType

    exchange = await channel.declare_exchange(
        options.dead_letter_exchange, ExchangeType.FANOUT, durable=True
    )
    args: dict[str, Any] = {
        "x-queue-type": options.queue_type,
        "x-message-ttl": int(options.dead_letter_ttl * 1000),
    }
    queue = await channel.declare_queue(options.dead_letter_queue, durable=True, arguments=args)
    await queue.bind(exchange)
    return exchange, queue


async def declare_queue(
    channel: AbstractChannel, options: DispatchOptions, queue: str, worker_queue_ttl: float
) -> AbstractQueue:
    """The broker queue of conveyor queue ``queue``."""
    return await channel.declare_queue(
        options.queue_name(queue),
        durable=True,
        arguments=options.queue_arguments(queue, worker_queue_ttl),
    )

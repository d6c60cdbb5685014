"""What flow control looks like right now: running and waiting jobs per
concurrency key, starts per rate-limit key in the current window, and waiting
and running jobs per tenant of the fair queues.

Reads for the surfaces (``conveyor queues``, ``GET /api/v1/queues``, the
dashboard's queues page, ``/metrics``), each one backend read: the store's
``key_counts``, ``rate_key_usage`` and ``tenant_counts``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from conveyor.backends.base import Backend, QueueInfo, TenantCount
from conveyor.ratelimit import RateLimit

#: Groups (task, concurrency key) shown, those with most running first.
KEYS_SHOWN = 100
#: Rate windows (task, rate-limit key) shown, those with most starts first.
RATE_KEYS_SHOWN = 100
#: Tenants shown per fair queue (those with most waiting jobs); also the
#: ``/metrics`` label cap, the rest summed as one ``(other)`` tenant.
TENANTS_SHOWN = 50


@dataclass(frozen=True, slots=True)
class KeyUsage:
    """Jobs of ``task`` running under one concurrency ``key`` (``None``: the
    task's shared group), against the cap the app declares (``None``: unknown),
    and its ``waiting`` jobs (``None`` for a task without a key cap)."""

    task: str
    key: str | None
    running: int
    cap: int | None
    waiting: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "key": self.key,
            "running": self.running,
            "waiting": self.waiting,
            "cap": self.cap,
        }


@dataclass(frozen=True, slots=True)
class RateUsage:
    """Starts of ``task`` under one rate-limit ``key`` (``None``: its keyless
    window) in the current window, against the task's ``limit`` per ``period``."""

    task: str
    key: str | None
    used: int
    limit: int
    period: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "key": self.key,
            "used": self.used,
            "limit": self.limit,
            "period": self.period,
        }


async def key_usage(
    backend: Backend, caps: Mapping[str, int], limit: int = KEYS_SHOWN
) -> list[KeyUsage]:
    """Running (and, for the key-capped tasks in ``caps``, waiting) jobs per
    ``(task, key)`` of those tasks and of every running job that carries a key;
    the ``limit`` busiest first."""
    counts = await backend.key_counts(sorted(caps), limit)
    return [KeyUsage(c.task, c.key, c.active, caps.get(c.task), c.waiting) for c in counts]


async def rate_usage(
    backend: Backend, rates: Mapping[str, RateLimit], limit: int = RATE_KEYS_SHOWN
) -> list[RateUsage]:
    """Starts per ``(task, rate_limit_key)`` in the current window of the tasks
    in ``rates`` (those rate-limited per key); the ``limit`` fullest first."""
    if not rates:
        return []
    uses = await backend.rate_key_usage(rates, limit)
    return [
        RateUsage(u.task, u.key, u.used, rates[u.task].limit, rates[u.task].period) for u in uses
    ]


async def tenant_usage(
    backend: Backend, queues: Iterable[QueueInfo], limit: int = TENANTS_SHOWN
) -> dict[str, list[TenantCount]]:
    """Per fair queue of ``queues``, its ``limit`` tenants with most waiting jobs."""
    fair = [info.name for info in queues if info.fairness is not None]
    counts = await asyncio.gather(*(backend.tenant_counts(name, limit) for name in fair))
    return dict(zip(fair, counts, strict=True))

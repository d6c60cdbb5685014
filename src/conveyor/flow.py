"""What flow control looks like right now: running jobs per concurrency key,
and waiting and running jobs per tenant of the fair queues.

Reads for the surfaces (``conveyor queues``, ``GET /api/v1/queues``, the
dashboard's queues page, ``/metrics``). Key usage groups the store's active
jobs, which are bounded by the workers' total concurrency, so it needs no
operation of its own; tenant counts are the store's ``tenant_counts``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from conveyor.backends.base import Backend, JobFilter, QueueInfo, TenantCount
from conveyor.job import JobState

#: Most active jobs read for the view (far above any real cluster's concurrency).
MOST_ACTIVE = 10_000
#: Tenants shown per fair queue (those with most waiting jobs); also the
#: ``/metrics`` label cap, the rest summed as one ``(other)`` tenant.
TENANTS_SHOWN = 50


@dataclass(frozen=True, slots=True)
class KeyUsage:
    """Jobs of ``task`` running under one concurrency ``key`` (``None``: the
    task's shared group), against the cap the app declares (``None``: unknown)."""

    task: str
    key: str | None
    running: int
    cap: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "key": self.key, "running": self.running, "cap": self.cap}


async def key_usage(backend: Backend, caps: Mapping[str, int]) -> list[KeyUsage]:
    """Running jobs per ``(task, key)`` of the key-capped tasks in ``caps`` and of
    every active job that carries a key; busiest first."""
    active = await backend.list_jobs(JobFilter(states=[JobState.ACTIVE]), limit=MOST_ACTIVE)
    running = Counter(
        (job.task, job.concurrency_key)
        for job in active
        if job.concurrency_key is not None or job.task in caps
    )
    rows = [KeyUsage(task, key, n, caps.get(task)) for (task, key), n in running.items()]
    rows.sort(key=lambda row: (-row.running, row.task, row.key or ""))
    return rows


async def tenant_usage(
    backend: Backend, queues: Iterable[QueueInfo], limit: int = TENANTS_SHOWN
) -> dict[str, list[TenantCount]]:
    """Per fair queue of ``queues``, its ``limit`` tenants with most waiting jobs."""
    fair = [info.name for info in queues if info.fairness is not None]
    counts = await asyncio.gather(*(backend.tenant_counts(name, limit) for name in fair))
    return dict(zip(fair, counts, strict=True))

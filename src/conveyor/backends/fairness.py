"""Helpers of the fair-queue rule (``backends/base.py``) every store shares:
the order of tenant names and the ranking of ``tenant_counts``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from conveyor.backends.operations import JobFilter
from conveyor.backends.records import TenantCount
from conveyor.job import JobState

if TYPE_CHECKING:
    from conveyor.backends.base import Backend

#: Most jobs :func:`tenant_counts_by_listing` reads per state.
LISTING_MAX = 100_000


def tenant_order(tenant: str | None) -> tuple[bool, str]:
    """Sort key of tenants: ``None`` before every name, names ascending."""
    return (tenant is not None, tenant or "")


def rank_tenant_counts(counts: Iterable[TenantCount], limit: int) -> list[TenantCount]:
    """The ``limit`` tenants with most waiting jobs (then most active, then by
    name), leaving out tenants with neither."""
    rows = [c for c in counts if c.waiting or c.active]
    rows.sort(key=lambda c: (-c.waiting, -c.active, tenant_order(c.tenant)))
    return rows[: max(0, limit)]


async def tenant_counts_by_listing(backend: Backend, queue: str, limit: int) -> list[TenantCount]:
    """``tenant_counts`` from the store's job listings (up to :data:`LISTING_MAX`
    jobs per state): for a store without counts per tenant."""
    waiting: Counter[str | None] = Counter()
    active: Counter[str | None] = Counter()
    for state, counter in (
        (JobState.WAITING, waiting),
        (JobState.DELAYED, waiting),
        (JobState.ACTIVE, active),
    ):
        where = JobFilter(states=[state], queue=queue)
        for job in await backend.list_jobs(where, limit=LISTING_MAX):
            counter[job.tenant] += 1
    counts = (TenantCount(t, waiting[t], active[t]) for t in waiting.keys() | active.keys())
    return rank_tenant_counts(counts, limit)

"""Helpers of the fair-queue rule (``backends/base.py``) every store shares:
the order of tenant names and the ranking of ``tenant_counts``."""

from __future__ import annotations

from collections.abc import Iterable

from conveyor.backends.records import TenantCount


def tenant_order(tenant: str | None) -> tuple[bool, str]:
    """Sort key of tenants: ``None`` before every name, names ascending."""
    return (tenant is not None, tenant or "")


def rank_tenant_counts(counts: Iterable[TenantCount], limit: int) -> list[TenantCount]:
    """The ``limit`` tenants with most waiting jobs (then most active, then by
    name), leaving out tenants with neither."""
    rows = [c for c in counts if c.waiting or c.active]
    rows.sort(key=lambda c: (-c.waiting, -c.active, tenant_order(c.tenant)))
    return rows[: max(0, limit)]

"""Fair queues on the HTTP surfaces: ``GET /api/v1/queues`` (fairness, weights,
jobs per tenant) and ``/metrics`` (``conveyor_tenant_jobs``, its label cap)."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from conveyor.app import Conveyor
from conveyor.backends.base import ClaimRequest, QueueInfo
from conveyor.flow import TENANTS_SHOWN
from conveyor.server.metrics import NO_TENANT, OTHER_TENANTS

from .conftest import READ, Serve, auth


async def fair_app(serve: Serve) -> tuple[Conveyor, httpx.AsyncClient]:
    app, client = await serve()
    backend = await app.connect()
    await backend.configure_queue(QueueInfo("emails", fairness="tenant", weights={"org-1": 3}))
    return app, client


async def tenant_samples(client: httpx.AsyncClient) -> list[Sample]:
    response = await client.get("/metrics", headers=auth(READ))
    assert response.status_code == 200, response.text
    families = {f.name: f.samples for f in text_string_to_metric_families(response.text)}
    return families["conveyor_tenant_jobs"]


async def test_the_queues_api_shows_fairness_and_jobs_per_tenant(serve: Serve) -> None:
    app, client = await fair_app(serve)
    for tenant, count in (("org-1", 3), ("org-2", 1), (None, 2)):
        for _ in range(count):
            await app.enqueue("mail.send", {"to": "a@b.c"}, tenant=tenant)
    await app.enqueue("add", {"a": 1, "b": 2}, tenant="org-9")  # a plain queue
    backend = await app.connect()
    claimed = await backend.claim_jobs(
        ClaimRequest(worker_id="w", queues=["emails"], limit=2, lease=30)
    )
    assert sorted(str(job.tenant) for job in claimed.jobs) == ["None", "org-1"]

    response = await client.get("/api/v1/queues", headers=auth(READ))
    assert response.status_code == 200
    rows = {row["name"]: row for row in response.json()["queues"]}
    emails = rows["emails"]
    assert (emails["fairness"], emails["weights"]) == ("tenant", {"org-1": 3.0})
    assert emails["tenants"] == [
        {"tenant": "org-1", "waiting": 2, "active": 1},
        {"tenant": None, "waiting": 1, "active": 1},
        {"tenant": "org-2", "waiting": 1, "active": 0},
    ]
    plain = rows["default"]
    assert (plain["fairness"], plain["weights"]) == (None, {})
    assert "tenants" not in plain


async def test_metrics_count_jobs_per_tenant_of_fair_queues(serve: Serve) -> None:
    app, client = await fair_app(serve)
    for tenant in ("org-1", "org-1", None):
        await app.enqueue("mail.send", {"to": "a@b.c"}, tenant=tenant)
    await app.enqueue("add", {"a": 1, "b": 2}, tenant="org-9")
    samples = await tenant_samples(client)
    got = {(s.labels["queue"], s.labels["tenant"], s.labels["state"]): s.value for s in samples}
    assert got == {
        ("emails", "org-1", "waiting"): 2,
        ("emails", "org-1", "active"): 0,
        ("emails", NO_TENANT, "waiting"): 1,
        ("emails", NO_TENANT, "active"): 0,
    }


async def test_metrics_cap_the_tenant_labels(serve: Serve) -> None:
    app, client = await fair_app(serve)
    extra = 7
    jobs = [("mail.send", {"to": "x"}, {"tenant": f"t-{i:03d}"}) for i in range(TENANTS_SHOWN)]
    jobs += [("mail.send", {"to": "x"}, {"tenant": "big"})] * 3
    jobs += [("mail.send", {"to": "x"}, {"tenant": f"u-{i:03d}"}) for i in range(extra)]
    await app.enqueue_many(jobs)
    samples = await tenant_samples(client)
    tenants = {s.labels["tenant"] for s in samples}
    assert len(tenants) == TENANTS_SHOWN + 1  # the busiest 50, and the rest as one
    assert "big" in tenants
    assert OTHER_TENANTS in tenants
    waiting = {s.labels["tenant"]: s.value for s in samples if s.labels["state"] == "waiting"}
    assert waiting["big"] == 3
    # 50 shown: big and 49 of the 57 one-job tenants; the other 8 summed.
    assert waiting[OTHER_TENANTS] == TENANTS_SHOWN + extra - (TENANTS_SHOWN - 1)
    assert sum(waiting.values()) == TENANTS_SHOWN + 3 + extra

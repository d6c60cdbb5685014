"""The queues page shows a fair queue's fairness, weights and jobs per tenant."""

from __future__ import annotations

import re

from conveyor.backends.base import QueueInfo

from .conftest import READ, Serve, rows_of, signed_in


async def test_the_queues_page_shows_fairness_and_jobs_per_tenant(serve: Serve) -> None:
    app, client = await signed_in(serve, READ)
    backend = await app.connect()
    await backend.configure_queue(
        QueueInfo("emails", max_size=10_000, fairness="tenant", weights={"org-1": 3})
    )
    for tenant in ("org-1", "org-1", "org-2", None):
        await app.enqueue("mail.send", {"to": "a@b.c"}, tenant=tenant)
    await app.enqueue("report.build", {"pages": 1}, tenant="org-9")  # a plain queue

    page = await client.get("/queues")
    assert page.status_code == 200
    fairness = dict(re.findall(r'data-queue="([^"]+)".*?data-fairness>(.*?)</td>', page.text, re.S))
    assert re.sub(r"<[^>]+>|\s+", " ", fairness["emails"]).split() == ["tenant", "org-1=3"]
    assert fairness["default"].strip() == "—"
    assert rows_of(page.text, 'data-tenants="emails"') == [
        ["org-1", "2", "0"],
        ["(no tenant)", "1", "0"],
        ["org-2", "1", "0"],
    ]
    assert 'data-tenants="default"' not in page.text

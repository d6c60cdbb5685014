"""The queues page shows running and waiting jobs per concurrency key and
starts per rate-limit key in the current window."""

from __future__ import annotations

from conveyor.backends.base import ClaimRequest
from conveyor.context import JobContext

from .conftest import READ, Serve, rows_of, signed_in


async def test_the_queues_page_shows_jobs_per_key_and_rate_windows(serve: Serve) -> None:
    app, client = await signed_in(serve, READ)

    @app.task("crm.sync", key_concurrency=1, concurrency_key="tenant")
    async def sync(ctx: JobContext) -> None: ...

    @app.task("api.call", rate_limit="2/m", rate_limit_key="tenant")
    async def call(ctx: JobContext) -> None: ...

    for task in ("crm.sync", "api.call"):
        for tenant in ("org-1", "org-1", "org-1", "org-2"):
            await app.enqueue(task, tenant=tenant)
    backend = await app.connect()
    await backend.claim_jobs(
        ClaimRequest(
            worker_id="w",
            queues=["default"],
            limit=20,
            lease=30,
            key_limits={"crm.sync": 1},
            key_rate_limits=app.key_rate_limits(),
        )
    )

    page = await client.get("/queues")
    assert page.status_code == 200
    keys = rows_of(page.text, "data-keys")
    assert keys == [["crm.sync", "org-1", "1", "2", "1"], ["crm.sync", "org-2", "1", "0", "1"]]
    assert rows_of(page.text, "data-rates") == [
        ["api.call", "org-1", "2 full", "2", "1m"],
        ["api.call", "org-2", "1", "2", "1m"],
    ]


async def test_the_queues_page_leaves_out_flow_tables_when_idle(serve: Serve) -> None:
    app, client = await signed_in(serve, READ)
    await app.enqueue("mail.send", {"to": "a@b.c"})
    page = await client.get("/queues")
    assert page.status_code == 200
    assert "data-keys" not in page.text
    assert "data-rates" not in page.text

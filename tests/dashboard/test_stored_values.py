"""Every dashboard page renders whatever a store holds, even times no calendar
holds (a job an older version let through with run_at 1e20 or delay 1e308)."""

from __future__ import annotations

from typing import Any

from conveyor.backends.base import NewJob
from conveyor.ids import new_id

from .conftest import Serve, signed_in


async def test_pages_render_jobs_with_out_of_range_times(serve: Serve) -> None:
    app, client = await signed_in(serve)
    common: dict[str, Any] = {"task": "pay.charge", "queue": "default", "payload": b"{}"}
    jobs = await app.backend.enqueue_jobs(
        [
            NewJob(new_id(), run_at=1e20, **common),
            NewJob(new_id(), delay=1e308, **common),
            NewJob(new_id(), timeout=1e308, ttl=1e308, **common),
        ]
    )
    for job in jobs:
        page = await client.get(f"/jobs/{job.id}")
        assert page.status_code == 200, page.text
        assert job.id in page.text
    for path in ("/", "/jobs", "/jobs?state=delayed", "/queues"):
        page = await client.get(path)
        assert page.status_code == 200, (path, page.text[:300])

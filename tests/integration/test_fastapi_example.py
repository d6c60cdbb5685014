"""examples/fastapi_app.py, served over httpx's ASGI transport with its lifespan,
and a conveyor worker running in the test's own event loop."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from conveyor.job import JobState

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The example module, imported afresh against this test's SQLite file."""
    monkeypatch.setenv("CONVEYOR_URL", f"sqlite:///{tmp_path / 'jobs.db'}")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    sys.modules.pop("fastapi_app", None)
    return importlib.import_module("fastapi_app")


@pytest.fixture
async def client(example: ModuleType) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the example's API with its lifespan entered (the transport runs none)."""
    api = example.api
    async with api.router.lifespan_context(api):
        assert example.app.runtime.opened  # the lifespan opened the store
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            yield http
    assert not example.app.runtime.opened  # and closed it


async def test_a_report_is_enqueued_run_and_its_result_awaited(
    example: ModuleType, client: httpx.AsyncClient
) -> None:
    created = await client.post("/reports", json={"customer": "acme", "months": 2})
    assert created.status_code == 202
    job_id = created.json()["job_id"]
    assert created.json()["state"] == JobState.WAITING.value
    again = await client.post("/reports", json={"customer": "acme", "months": 2})
    assert again.json() == {"job_id": job_id, "state": "waiting", "duplicate": True}

    # Nothing runs it yet: the endpoint answers 504 after its timeout.
    pending = await client.get(f"/reports/{job_id}/result", params={"timeout": 0.2})
    assert pending.status_code == 504

    worker = example.app.worker(install_signals=False)
    running = asyncio.create_task(worker.run())
    try:
        done = await client.get(f"/reports/{job_id}/result", params={"timeout": 10})
        assert done.status_code == 200
        assert done.json() == {
            "job_id": job_id,
            "result": {"customer": "acme", "months": 2, "rows": 60},
        }
        status = await client.get(f"/reports/{job_id}")
        assert status.json()["state"] == "completed"
        assert status.json()["progress"]["phase"] == "done"

        failing = await client.post("/reports", json={"customer": "acme", "months": 500})
        failing_id = failing.json()["job_id"]
        failed = await client.get(f"/reports/{failing_id}/result", params={"timeout": 20})
        assert failed.status_code == 409
        assert "more history than we keep" in failed.json()["detail"]
    finally:
        worker.stop()
        await running


async def test_unknown_jobs_and_bad_requests(client: httpx.AsyncClient) -> None:
    assert (await client.get("/reports/01J00000000000000000000000")).status_code == 404
    assert (await client.post("/reports", json={"customer": ""})).status_code == 422

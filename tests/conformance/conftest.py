"""The ``backend`` fixture: every conformance test runs once per selected backend.

Select backends with ``CONVEYOR_TEST_BACKENDS`` (comma list; default
``memory,sqlite``). A new backend plugs in by adding one :class:`BackendKit`
subclass to :data:`KITS`: how to make a fresh store's URL for one test, a URL a
second instance can open onto that same store, and how to corrupt a stored
payload behind the backend's back.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from conveyor.backends.base import Backend
from conveyor.backends.registry import backend_from_url

#: Not JSON: what a corrupt row's payload column holds.
CORRUPT = b"{this is not json"


class BackendKit:
    """How the suite drives one kind of backend; one instance per test."""

    name: str

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path

    def url(self) -> str:
        """A URL for a fresh, empty store for this test."""
        raise NotImplementedError

    def shared_url(self) -> str:
        """A URL that any number of backend instances open onto one store."""
        raise NotImplementedError

    async def corrupt_payload(self, backend: Backend, job_id: str) -> None:
        """Overwrite the stored payload of ``job_id`` with bytes that are not JSON."""
        raise NotImplementedError

    def cleanup(self) -> None:
        """Forget whatever this test's stores left behind."""


class MemoryKit(BackendKit):
    name = "memory"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.store_name = f"conformance-{uuid.uuid4().hex}"

    def url(self) -> str:
        return "memory://"

    def shared_url(self) -> str:
        return f"memory://{self.store_name}"

    async def corrupt_payload(self, backend: Backend, job_id: str) -> None:
        # The memory store is plain Python objects: poke the row directly.
        row = backend._store.jobs[job_id]  # type: ignore[attr-defined]
        row.payload = CORRUPT

    def cleanup(self) -> None:
        from conveyor.backends.memory import drop_memory_store

        drop_memory_store(self.store_name)


class SQLiteKit(BackendKit):
    name = "sqlite"

    @property
    def path(self) -> Path:
        return self.tmp_path / "conveyor.db"

    def url(self) -> str:
        return f"sqlite:///{self.tmp_path}/conveyor.db"

    def shared_url(self) -> str:
        return self.url()

    async def corrupt_payload(self, backend: Backend, job_id: str) -> None:
        with sqlite3.connect(self.path) as db:
            cursor = db.execute("UPDATE jobs SET payload = ? WHERE id = ?", (CORRUPT, job_id))
            assert cursor.rowcount == 1, f"no row for job {job_id} in {self.path}"


KITS: dict[str, type[BackendKit]] = {kit.name: kit for kit in (MemoryKit, SQLiteKit)}


def _selected() -> list[str]:
    raw = os.environ.get("CONVEYOR_TEST_BACKENDS", "memory,sqlite")
    names = [name.strip() for name in raw.split(",") if name.strip()]
    unknown = [name for name in names if name not in KITS]
    if unknown or not names:
        raise pytest.UsageError(
            f"CONVEYOR_TEST_BACKENDS={raw!r}: unknown backend(s) {unknown}; known: {sorted(KITS)}"
        )
    return names


@pytest.fixture(params=_selected())
def kit(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendKit]:
    instance = KITS[request.param](tmp_path)
    yield instance
    instance.cleanup()


async def _opened(url: str) -> Backend:
    backend = backend_from_url(url)
    await backend.open()
    return backend


@pytest.fixture
async def backend(kit: BackendKit) -> AsyncIterator[Backend]:
    """A fresh, opened backend on an empty store; closed after the test."""
    opened = await _opened(kit.url())
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def backend_pair(kit: BackendKit) -> AsyncIterator[tuple[Backend, Backend]]:
    """Two opened backend instances on one fresh store (two apps, one database)."""
    first = await _opened(kit.shared_url())
    second = await _opened(kit.shared_url())
    try:
        yield first, second
    finally:
        await second.close()
        await first.close()

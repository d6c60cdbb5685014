"""One :class:`BackendKit` per backend: how a test gets a fresh, real store.

Both the conformance suite and the in-process worker suite take their backends
from here, so a new backend plugs in at one place: subclass :class:`BackendKit`
and add it to :data:`KITS`.

Select backends with ``CONVEYOR_TEST_BACKENDS`` (comma list; default: every
kit). A kit that needs a server (PostgreSQL, Redis) reads its URL from the
environment ``scripts/test.sh`` exports; without it the test is skipped on a
developer's machine and fails under CI (see ``tests/conftest.py``).
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from pathlib import Path

import pytest

from conveyor.backends.base import Backend

#: Not JSON: what a corrupt row's payload column holds.
CORRUPT = b"{this is not json"


class BackendKit:
    """How the suites drive one kind of backend; one instance per test."""

    name: str

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path

    def url(self) -> str:
        """A URL for a fresh, empty store for this test."""
        raise NotImplementedError

    def shared_url(self) -> str:
        """A URL that any number of backend instances (apps) open onto one store."""
        raise NotImplementedError

    async def corrupt_payload(self, backend: Backend, job_id: str) -> None:
        """Overwrite the stored payload of ``job_id`` with bytes that are not JSON."""
        raise NotImplementedError

    async def cleanup(self) -> None:
        """Forget whatever this test's stores left behind."""


class MemoryKit(BackendKit):
    name = "memory"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.store_name = f"tests-{uuid.uuid4().hex}"

    def url(self) -> str:
        return "memory://"

    def shared_url(self) -> str:
        return f"memory://{self.store_name}"

    async def corrupt_payload(self, backend: Backend, job_id: str) -> None:
        # The memory store is plain Python objects: poke the row directly.
        row = backend._store.jobs[job_id]  # type: ignore[attr-defined]
        row.payload = CORRUPT

    async def cleanup(self) -> None:
        from conveyor.backends.memory import drop_memory_store

        drop_memory_store(self.store_name)


class SQLiteKit(BackendKit):
    name = "sqlite"

    @property
    def path(self) -> Path:
        return self.tmp_path / "conveyor.db"

    def url(self) -> str:
        return f"sqlite:///{self.path}"

    def shared_url(self) -> str:
        return self.url()

    async def corrupt_payload(self, backend: Backend, job_id: str) -> None:
        with sqlite3.connect(self.path) as db:
            cursor = db.execute("UPDATE jobs SET payload = ? WHERE id = ?", (CORRUPT, job_id))
            assert cursor.rowcount == 1, f"no row for job {job_id} in {self.path}"


KITS: dict[str, type[BackendKit]] = {kit.name: kit for kit in (MemoryKit, SQLiteKit)}


def selected_backends() -> list[str]:
    """Names from ``CONVEYOR_TEST_BACKENDS``, or every kit."""
    raw = os.environ.get("CONVEYOR_TEST_BACKENDS", ",".join(KITS))
    names = [name.strip() for name in raw.split(",") if name.strip()]
    unknown = [name for name in names if name not in KITS]
    if unknown or not names:
        raise pytest.UsageError(
            f"CONVEYOR_TEST_BACKENDS={raw!r}: unknown backend(s) {unknown}; known: {sorted(KITS)}"
        )
    return names


def backend_params() -> list[object]:
    """One ``pytest.param`` per selected backend (never skipped)."""
    return [pytest.param(name, id=name) for name in selected_backends()]

"""The suite's fixtures, built on ``backend_kit_factory``, which the backend's
own tests provide (parametrize it to run the suite against several backends)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from conveyor.backends.base import Backend
from conveyor.testing.conformance.kit import BackendKit, KitFactory
from conveyor.testing.conformance.suite.helpers import FreshBackend

# pytest_asyncio.fixture rather than pytest.fixture: the suite then also runs in
# pytest-asyncio's strict mode, whatever the backend project configured.


@pytest_asyncio.fixture
async def kit(backend_kit_factory: KitFactory, tmp_path: Path) -> AsyncIterator[BackendKit]:
    """This test's kit; cleaned up after the test."""
    instance = backend_kit_factory(tmp_path)
    try:
        yield instance
    finally:
        await instance.cleanup()


async def _opened(backend: Backend) -> Backend:
    await backend.open()
    return backend


@pytest_asyncio.fixture
async def backend(kit: BackendKit) -> AsyncIterator[Backend]:
    """A fresh, opened backend on an empty store; closed after the test."""
    opened = await _opened(kit.backend())
    try:
        yield opened
    finally:
        await opened.close()


@pytest_asyncio.fixture
async def backend_pair(kit: BackendKit) -> AsyncIterator[tuple[Backend, Backend]]:
    """Two opened backend instances on one fresh store (two apps, one database)."""
    first = await _opened(kit.shared_backend())
    second = await _opened(kit.shared_backend())
    try:
        yield first, second
    finally:
        await second.close()
        await first.close()


@pytest_asyncio.fixture
async def fresh_backend(
    backend_kit_factory: KitFactory, tmp_path: Path
) -> AsyncIterator[FreshBackend]:
    """Opens backends on new, empty stores of the test's kind (for reruns, see
    ``helpers.again_when_late``); each is closed and its store removed after the test."""
    kits: list[BackendKit] = []
    opened: list[Backend] = []

    async def fresh() -> Backend:
        folder = tmp_path / f"fresh-{len(kits)}"
        folder.mkdir()
        kits.append(backend_kit_factory(folder))
        opened.append(await _opened(kits[-1].backend()))
        return opened[-1]

    try:
        yield fresh
    finally:
        for each in reversed(opened):
            await each.close()
        for other in reversed(kits):
            await other.cleanup()

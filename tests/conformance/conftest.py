"""The ``backend`` fixture: every conformance test runs once per selected backend.

Backends and how to get a fresh store of each come from ``support.kits`` (shared
with the worker suite); select them with ``CONVEYOR_TEST_BACKENDS``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from conveyor.backends.base import Backend
from conveyor.backends.registry import backend_from_url
from support.kits import KITS, BackendKit, backend_params

from .helpers import FreshBackend


@pytest.fixture(params=backend_params())
async def kit(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BackendKit]:
    instance = KITS[request.param](tmp_path)
    try:
        yield instance
    finally:
        await instance.cleanup()


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


@pytest.fixture
async def fresh_backend(kit: BackendKit, tmp_path: Path) -> AsyncIterator[FreshBackend]:
    """Opens backends on new, empty stores of the test's kind (for reruns, see
    ``helpers.again_when_late``); each is closed and its store removed after the test."""
    kits: list[BackendKit] = []
    opened: list[Backend] = []

    async def fresh() -> Backend:
        folder = tmp_path / f"fresh-{len(kits)}"
        folder.mkdir()
        kits.append(type(kit)(folder))
        opened.append(await _opened(kits[-1].url()))
        return opened[-1]

    try:
        yield fresh
    finally:
        for backend in reversed(opened):
            await backend.close()
        for other in reversed(kits):
            await other.cleanup()

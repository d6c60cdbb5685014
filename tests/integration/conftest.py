"""Fixtures shared by the in-process worker tests (helpers in ``worker_fixtures``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from worker_fixtures import Stack, open_stack

from support.kits import backend_params


@pytest.fixture(params=backend_params())
async def stack(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stack]:
    """A fresh store per test, on each selected backend; its apps are closed after."""
    async with open_stack(request.param, tmp_path) as opened:
        yield opened

"""The pytest plugin: a fresh conveyor app per test.

Loaded by pytest automatically once conveyor is installed (the ``pytest11``
entry point), or by hand with ``pytest_plugins = ["conveyor.testing.pytest_plugin"]``
or ``-p conveyor.testing.pytest_plugin``. It adds one fixture and one marker::

    async def test_signup(conveyor_app):
        @conveyor_app.task()
        async def welcome(ctx, email): ...

        await conveyor_app.enqueue("welcome", {"email": "a@example.com"})
        await assert_enqueued(conveyor_app, "welcome", payload={"email": "a@example.com"})

    @pytest.mark.conveyor_app(backend="sqlite", lease="5s")
    async def test_on_a_file(conveyor_app): ...

pytest loads it in every session of every project that has conveyor installed:
it defines nothing else, and changes nothing unless a test asks for the fixture.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from conveyor.app import Conveyor

MARKER = "conveyor_app"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(backend='memory', **settings): how the conveyor_app fixture builds "
        "its app: backend 'memory' (default), 'sqlite' (a file in tmp_path) or a URL; "
        "settings are Conveyor(...) keyword settings",
    )


def app_url(backend: str, tmp_path: Path) -> str:
    """The URL for a marker's ``backend``: a name, or a URL used as given."""
    if backend == "memory":
        return "memory://"
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'conveyor.db'}"
    if "://" in backend:
        return backend
    raise ValueError(f"@pytest.mark.{MARKER}(backend={backend!r}): use 'memory', 'sqlite' or a URL")


async def _conveyor_app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Conveyor]:
    """A new conveyor app on a fresh, empty ``memory://`` store, closed after the
    test; ``@pytest.mark.conveyor_app(...)`` picks another store or settings."""
    marker = request.node.get_closest_marker(MARKER)
    settings: dict[str, Any] = dict(marker.kwargs) if marker else {}
    url = app_url(str(settings.pop("backend", "memory")), tmp_path)
    app = Conveyor(url, **settings)
    try:
        yield app
    finally:
        await app.close()


try:
    import pytest_asyncio
except ImportError:  # the fixture then explains what is missing, when a test asks for it

    @pytest.fixture(name="conveyor_app")
    def _needs_pytest_asyncio() -> None:
        pytest.fail("the conveyor_app fixture needs pytest-asyncio: pip install pytest-asyncio")

else:
    conveyor_app = pytest_asyncio.fixture(_conveyor_app, name="conveyor_app")

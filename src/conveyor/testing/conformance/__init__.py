"""The backend conformance suite, importable by any backend, in or out of this repository.

A backend's tests run the whole suite from one module of their own::

    # tests/test_conveyor_conformance.py
    import pytest
    from conveyor.testing.conformance import *  # noqa: F403  the tests and their fixtures

    @pytest.fixture
    def backend_kit_factory():
        return MyKit  # a BackendKit subclass: fresh stores of my backend

Importing this package imports every module of :mod:`.suite` and lifts its tests
(``test_*``) and the suite's fixtures into this namespace, where ``import *``
picks them up; pytest collects them in the importing module. Each test is marked
``asyncio``, so the suite runs in pytest-asyncio's strict mode too.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pytest

# Before the suite is imported: pytest rewrites its asserts, so a failure shows
# the values compared, as in a test module of the backend's own.
pytest.register_assert_rewrite("conveyor.testing.conformance.suite")

from conveyor.testing.conformance import suite  # noqa: E402  # after the rewrite hook
from conveyor.testing.conformance.fixtures import (  # noqa: E402
    backend,
    backend_pair,
    fresh_backend,
    kit,
)
from conveyor.testing.conformance.kit import BackendKit, KitFactory  # noqa: E402

__all__ = [
    "BackendKit",
    "KitFactory",
    "backend",
    "backend_pair",
    "fresh_backend",
    "kit",
]


def _gather_tests() -> dict[str, Any]:
    """Every ``test_*`` function of the suite's modules, by name; two modules
    defining one name would hide a test, so that is refused."""
    found: dict[str, Any] = {}
    where: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(suite.__path__), key=lambda info: info.name):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"{suite.__name__}.{info.name}")
        for name, value in vars(module).items():
            if not (name.startswith("test_") and inspect.isfunction(value)):
                continue
            if name in found and found[name] is not value:
                raise ImportError(f"test {name} is in both {where[name]} and {info.name}")
            if inspect.iscoroutinefunction(value):
                value = pytest.mark.asyncio(value)
            found[name], where[name] = value, info.name
    return found


TESTS = _gather_tests()
globals().update(TESTS)
__all__ += sorted(TESTS)  # built at import: one name per suite test

"""Fixtures shared by every test folder: where the real services are.

``scripts/test.sh`` finds (or starts) PostgreSQL and Redis and exports
``CONVEYOR_TEST_POSTGRES_URL`` / ``CONVEYOR_TEST_REDIS_URL``. A test that needs
one takes the ``postgres_url`` / ``redis_url`` fixture. When the variable is
missing the test is skipped on a developer's machine, but fails under CI (or
whenever ``CONVEYOR_REQUIRE_SERVICES=1``, which scripts/test.sh sets): a
backend that CI did not test must never look green.

Per-area fixtures (the parametrized ``backend``, fresh schemas and key
prefixes) live in the conftest.py of their own folder.
"""

from __future__ import annotations

import os

import pytest

_TRUE = {"1", "true", "yes", "on"}


def services_required() -> bool:
    """True under CI or when scripts/test.sh provided the services."""
    return any(
        os.environ.get(name, "").strip().lower() in _TRUE
        for name in ("CI", "CONVEYOR_REQUIRE_SERVICES")
    )


def _service_url(var: str, what: str) -> str:
    url = os.environ.get(var, "").strip()
    if url:
        return url
    message = (
        f"{var} is not set: this test needs a real {what}. "
        f"Run scripts/test.sh (it finds or starts one), or export {var}."
    )
    if services_required():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """``postgresql://USER@127.0.0.1:PORT/test`` of a server the tests may use."""
    return _service_url("CONVEYOR_TEST_POSTGRES_URL", "PostgreSQL server")


@pytest.fixture(scope="session")
def redis_url() -> str:
    """``redis://127.0.0.1:PORT/0`` of a server the tests may use."""
    return _service_url("CONVEYOR_TEST_REDIS_URL", "Redis server")

"""Fixtures shared by every test folder: where the real services are.

``scripts/test.sh`` finds (or starts) PostgreSQL and Redis and exports
``CONVEYOR_TEST_POSTGRES_URL`` / ``CONVEYOR_TEST_REDIS_URL``. A test that needs
one takes the ``postgres_url`` / ``redis_url`` fixture. When the variable is
missing the test is skipped on a developer's machine, but fails under CI
(``support/services.py``): a backend that CI did not test must never look green.

Per-area fixtures (the parametrized ``backend``, fresh schemas and key
prefixes) live in the conftest.py of their own folder.
"""

from __future__ import annotations

import pytest

from support.services import service_url


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """``postgresql://USER@127.0.0.1:PORT/test`` of a server the tests may use."""
    return service_url("CONVEYOR_TEST_POSTGRES_URL", "PostgreSQL server")


@pytest.fixture(scope="session")
def redis_url() -> str:
    """``redis://127.0.0.1:PORT/0`` of a server the tests may use."""
    return service_url("CONVEYOR_TEST_REDIS_URL", "Redis server")

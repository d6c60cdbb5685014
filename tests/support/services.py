"""A test that needs a real service (PostgreSQL, Redis, a binary) and lacks it
is skipped on a developer's machine, but fails under CI or whenever
``CONVEYOR_REQUIRE_SERVICES=1`` (scripts/test.sh sets it): a backend that CI
did not test must never look green."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

_TRUE = {"1", "true", "yes", "on"}


def services_required() -> bool:
    """True under CI or when scripts/test.sh provided the services."""
    return any(
        os.environ.get(name, "").strip().lower() in _TRUE
        for name in ("CI", "CONVEYOR_REQUIRE_SERVICES")
    )


def missing_service(message: str) -> NoReturn:
    """Fail the test under CI, else skip it, saying what is missing."""
    if services_required():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def service_url(var: str, what: str) -> str:
    """The URL of a real server that scripts/test.sh exported in ``var``."""
    url = os.environ.get(var, "").strip()
    if url:
        return url
    missing_service(
        f"{var} is not set: this test needs a real {what}. "
        f"Run scripts/test.sh (it finds or starts one), or export {var}."
    )

"""This repository's kits for the conformance suite: every conformance test runs
once per selected backend (``CONVEYOR_TEST_BACKENDS``; kits in ``support.kits``,
shared with the worker suite). The suite itself is ``conveyor.testing.conformance``,
pulled in by ``test_conformance.py`` as any other backend would. PostgreSQL +
RabbitMQ dispatch runs it from ``test_conformance_dispatch.py``, which lists
the tests that do not hold there and why."""

from __future__ import annotations

import pytest

from conveyor.testing.conformance import KitFactory
from support.kits import KITS, backend_params


@pytest.fixture(params=backend_params(exclude=("postgres+rabbitmq", "sqlite+rabbitmq")))
def backend_kit_factory(request: pytest.FixtureRequest) -> KitFactory:
    return KITS[request.param]

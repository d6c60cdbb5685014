"""The backend conformance suite (``conveyor.testing.conformance``), run against
this package's backends: the kits come from ``conftest.py``."""

from conveyor.testing.conformance import *  # noqa: F403  # the suite's tests and fixtures

"""Testing tools for conveyor users and backend authors.

- :func:`assert_enqueued`, :func:`refute_enqueued`, :func:`enqueued_jobs`: what an
  app has enqueued (``assertions.py`` has the matching rules);
- :func:`perform_job`: run one task's handler in-process, as a worker would;
- ``conveyor.testing.pytest_plugin``: the ``conveyor_app`` fixture (loaded by
  pytest automatically once conveyor is installed);
- ``conveyor.testing.conformance``: the backend conformance suite (it needs
  pytest and pytest-asyncio; imported only on demand).

See docs/how-to/testing.md and docs/how-to/writing-a-backend.md.
"""

from conveyor.testing.assertions import assert_enqueued, enqueued_jobs, refute_enqueued
from conveyor.testing.perform import perform_job

__all__ = ["assert_enqueued", "enqueued_jobs", "perform_job", "refute_enqueued"]

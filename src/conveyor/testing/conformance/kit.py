"""The kit: what a backend provides so that the conformance suite can test it.

A kit is made once per test, with that test's own ``tmp_path``, and gives the
suite fresh, empty stores of its backend; :meth:`BackendKit.cleanup` runs after
the test. The suite opens and closes every backend it asks for itself.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from conveyor.backends.base import Backend


class BackendKit:
    """How the conformance suite drives one kind of backend; one instance per test.

    Subclass it and override the four methods; the constructor takes the test's
    ``tmp_path`` (a kit that needs no files may ignore it).
    """

    #: A short name for reports (``memory``, ``sqlite``, ...).
    name: str = ""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path

    def backend(self) -> Backend:
        """A new, unopened backend on a fresh, empty store of its own."""
        raise NotImplementedError(f"{type(self).__name__}.backend")

    def shared_backend(self) -> Backend:
        """A new, unopened backend on this kit's shared store: every call gives
        another instance (another app) onto the same, initially empty store."""
        raise NotImplementedError(f"{type(self).__name__}.shared_backend")

    async def corrupt_payload(self, backend: Backend, job_id: str) -> None:
        """Overwrite the stored payload of ``job_id`` with bytes that are not JSON
        (the suite checks that reading it gives ``decode_error``, not a crash)."""
        raise NotImplementedError(f"{type(self).__name__}.corrupt_payload")

    async def cleanup(self) -> None:
        """Remove whatever this test's stores left behind (schemas, keys, files)."""


#: Makes a kit for one test from its ``tmp_path``: usually the kit class itself.
KitFactory = Callable[[Path], BackendKit]

"""The SQLite backend (``sqlite:///path/to/file.db``): the embedded default.

See :mod:`conveyor.backends.sqlite.backend` and docs/explanation/sqlite.md.
"""

from __future__ import annotations

from conveyor.backends.sqlite.backend import SQLiteBackend

__all__ = ["SQLiteBackend"]

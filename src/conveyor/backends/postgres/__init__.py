"""The PostgreSQL backend (``postgresql://user@host/db?schema=conveyor``).

See :mod:`conveyor.backends.postgres.backend` and docs/explanation/postgres.md.
"""

from __future__ import annotations

from conveyor.backends.postgres.backend import PostgresBackend

__all__ = ["PostgresBackend"]

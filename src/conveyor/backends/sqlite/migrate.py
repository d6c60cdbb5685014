"""Numbered schema migrations, tracked in ``PRAGMA user_version``.

``migrations/NNNN_name.sql`` are applied in order, all pending ones inside ONE
``BEGIN IMMEDIATE`` transaction: two processes opening a fresh file at once
serialise on the write lock, and the second one finds the version already
moved. Each file ends with ``PRAGMA user_version = NNNN;`` (user_version lives
in the database header, so it commits or rolls back with the schema).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from importlib import resources
from typing import LiteralString

from conveyor.backends.namedsql import trusted_sql
from conveyor.backends.sqlite.queries import P, split_statements
from conveyor.errors import BackendError

_PACKAGE = "conveyor.backends.sqlite"
_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    statements: tuple[LiteralString, ...]


def load_migrations() -> list[Migration]:
    folder = resources.files(_PACKAGE).joinpath("migrations")
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if not match:
            continue
        text = entry.read_text(encoding="utf-8")
        statements = tuple(trusted_sql(s) for s in split_statements(text))
        found.append(Migration(int(match.group(1)), entry.name, statements))
    found.sort(key=lambda m: m.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise BackendError(f"SQLite migrations are not numbered 1..n: {migration.name}")
    return found


def load_schema() -> list[LiteralString]:
    """The statements of ``schema.sql``, the current schema snapshot."""
    text = resources.files(_PACKAGE).joinpath("schema.sql").read_text(encoding="utf-8")
    return [trusted_sql(s) for s in split_statements(text)]


LATEST = len(load_migrations())


def user_version(conn: sqlite3.Connection) -> int:
    (query,) = P.user_version
    row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the schema up to date (inside the caller's BEGIN IMMEDIATE); returns
    the version before. Refuses a database made by a newer conveyor."""
    before = user_version(conn)
    if before > LATEST:
        raise BackendError(
            f"this SQLite database has schema version {before}, newer than this "
            f"conveyor knows ({LATEST}); upgrade conveyor"
        )
    for migration in load_migrations():
        if migration.version <= before:
            continue
        for statement in migration.statements:
            conn.execute(statement)
        after = user_version(conn)
        if after != migration.version:
            raise BackendError(
                f"migration {migration.name} left user_version at {after}, "
                f"not {migration.version} (its last statement must set it)"
            )
    return before

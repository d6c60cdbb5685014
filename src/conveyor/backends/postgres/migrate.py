"""Numbered schema migrations, recorded in ``<schema>.schema_migrations``.

``migrations/NNNN_name.sql`` are applied in order inside ONE transaction that
first takes ``pg_advisory_xact_lock`` on the schema's name: many workers
starting at once against a fresh database serialise there, and every one but
the first finds nothing left to do. DDL is transactional in PostgreSQL, so a
migration that fails leaves the schema exactly as it was. The statements
around the migrations (lock, bookkeeping table) are named blocks of migrate.sql.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources

from conveyor.backends.postgres.connection import Conn
from conveyor.backends.postgres.queries import migration_queries, substitute
from conveyor.errors import BackendError

_PACKAGE = "conveyor.backends.postgres"
_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    script: str
    """With placeholders (see queries.substitute)."""


@dataclass(slots=True)
class MigrationReport:
    before: int
    after: int
    applied: list[str] = field(default_factory=list)


def load_migrations() -> list[Migration]:
    folder = resources.files(_PACKAGE).joinpath("migrations")
    found = [
        Migration(int(match.group(1)), entry.name, entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if (match := _FILE.match(entry.name))
    ]
    found.sort(key=lambda m: m.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise BackendError(f"PostgreSQL migrations are not numbered 1..n: {migration.name}")
    return found


def load_schema() -> str:
    """``schema.sql``, the current schema snapshot (with placeholders)."""
    return resources.files(_PACKAGE).joinpath("schema.sql").read_text(encoding="utf-8")


LATEST = len(load_migrations())


def _table(schema: str) -> str:
    """The bookkeeping table's name, as a value for ``to_regclass``."""
    return f'"{schema}".schema_migrations'


async def current_version(conn: Conn, schema: str) -> int:
    """The schema's version; 0 when it has no conveyor tables yet."""
    mq = migration_queries(schema)
    exists = await conn.fetchval(mq.migrations_table_exists, _table(schema))
    if not exists:
        return 0
    version = await conn.fetchval(mq.current_version)
    return int(version or 0)


async def migrate(conn: Conn, schema: str, channel: str) -> MigrationReport:
    """Bring ``schema`` up to date. Refuses a schema made by a newer conveyor."""
    before = await current_version(conn, schema)
    if before == LATEST:
        return MigrationReport(before, before)
    mq = migration_queries(schema)
    async with conn.transaction():
        await conn.execute(mq.lock_schema, f"conveyor.migrate.{schema}")
        await conn.execute(mq.create_schema)
        await conn.execute(mq.create_migrations_table)
        before = await current_version(conn, schema)  # re-read under the lock
        if before > LATEST:
            raise BackendError(
                f"PostgreSQL schema {schema!r} has version {before}, newer than this "
                f"conveyor knows ({LATEST}); upgrade conveyor"
            )
        report = MigrationReport(before, before)
        for migration in load_migrations():
            if migration.version <= before:
                continue
            await conn.execute(substitute(migration.script, schema, channel))
            await conn.execute(mq.record_migration, migration.version, migration.name)
            report.applied.append(migration.name)
            report.after = migration.version
    return report

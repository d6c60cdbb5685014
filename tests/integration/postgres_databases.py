"""Databases of their own on the test PostgreSQL server, for the tests that
switch one read-only: ``ALTER DATABASE`` touches no other test's schema."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg

from support.services import service_url


@dataclass(frozen=True)
class OwnDatabase:
    server: str
    """The test server's URL (its own database): where the admin statements run."""
    name: str
    url: str
    """The URL of the new database, for the app."""

    async def set_read_only(self, on: bool, end_sessions: bool = True) -> None:
        """``default_transaction_read_only`` for the database's new sessions;
        ``end_sessions`` also ends the open ones (as a failover would)."""
        admin = await asyncpg.connect(self.server)
        try:
            setting = "on" if on else "off"
            await admin.execute(
                f'ALTER DATABASE "{self.name}" SET default_transaction_read_only = {setting}'
            )
            if end_sessions:
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = $1 AND pid <> pg_backend_pid()",
                    self.name,
                )
        finally:
            await admin.close()


@contextlib.asynccontextmanager
async def own_database() -> AsyncIterator[OwnDatabase]:
    """A new, empty database on the test server, dropped (FORCE) afterwards."""
    server = service_url("CONVEYOR_TEST_POSTGRES_URL", "PostgreSQL server")
    name = f"conveyor_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(server)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    base, _, query = server.partition("?")
    url = base.rsplit("/", 1)[0] + f"/{name}" + (f"?{query}" if query else "")
    try:
        yield OwnDatabase(server, name, url)
    finally:
        admin = await asyncpg.connect(server)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()

"""``conveyor migrate``: create or upgrade the backend's schema, and say what changed.

Every backend migrates by itself when it is first opened (PostgreSQL under an
advisory lock, SQLite under its write lock), so this command is optional: run
it from a deploy step to migrate before any worker starts, and to see the
schema version.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import click

from conveyor.backends.registry import scheme_of
from conveyor.cli.common import backend_options, json_option, make_app, print_json


def _sqlite_version(app_url: str) -> int:
    """The SQLite file's schema version before opening it (0: no file yet)."""
    from conveyor.backends.sqlite.url import parse_url

    path: Path = parse_url(app_url).path
    if not path.exists():
        return 0
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return int(db.execute("PRAGMA user_version").fetchone()[0])


def _report(scheme: str, backend: Any, sqlite_before: int) -> dict[str, Any]:
    if scheme in ("postgresql", "postgres"):
        migration = backend.migration
        return {
            "backend": "postgresql",
            "schema": backend.options.schema,
            "version_before": migration.before,
            "version": migration.after,
            "applied": list(migration.applied),
        }
    if scheme == "sqlite":
        from conveyor.backends.sqlite.migrate import LATEST, load_migrations

        return {
            "backend": "sqlite",
            "path": str(backend.options.path),
            "version_before": sqlite_before,
            "version": LATEST,
            "applied": [m.name for m in load_migrations() if m.version > sqlite_before],
        }
    return {"backend": scheme, "version_before": None, "version": None, "applied": []}


@click.command("migrate")
@json_option
@backend_options
def migrate_command(as_json: bool) -> None:
    """Create or upgrade the backend's schema and print its version.

    Safe to run while workers run, and from several machines at once.
    """
    app = make_app()
    scheme = scheme_of(app.url)
    before = _sqlite_version(app.url) if scheme == "sqlite" else 0

    async def go() -> dict[str, Any]:
        async with app:
            return _report(scheme, app.backend, before)

    report = asyncio.run(go())
    if as_json:
        print_json(report)
        return
    where = report.get("schema") or report.get("path") or ""
    name = f"{report['backend']} {where}".strip()
    if report["version"] is None:
        click.echo(f"{name}: nothing to migrate (this backend keeps no schema)")
    elif report["applied"]:
        click.echo(
            f"{name}: migrated from version {report['version_before']} to {report['version']}"
        )
        for applied in report["applied"]:
            click.echo(f"  applied {applied}")
    else:
        click.echo(f"{name}: up to date (version {report['version']})")

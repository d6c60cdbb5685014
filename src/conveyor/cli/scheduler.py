"""``conveyor scheduler APP``: run only the scheduler, until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio

import click

from conveyor.app import Conveyor
from conveyor.cli.common import state, url_option
from conveyor.cli.loading import load_app
from conveyor.cli.worker import LEVELS, log_format_option
from conveyor.logs import LogFormat, setup_logging


@click.command("scheduler")
@click.argument("app_spec", metavar="APP")
@click.option("--log-level", type=LEVELS, default="info", show_default=True)
@log_format_option
@url_option
def scheduler_command(app_spec: str, log_level: str, log_format: LogFormat) -> None:
    """Fire APP's schedules (module:attribute of a Conveyor) until SIGTERM/SIGINT.

    Run as many as you like: each slot is enqueued exactly once.
    """
    app = load_app(app_spec, state().url)
    app.backend  # noqa: B018  # builds (does not open) the backend: a bad URL fails here
    setup_logging(log_level, log_format)
    asyncio.run(run_scheduler(app))


async def run_scheduler(app: Conveyor) -> None:
    scheduler = app.scheduler(install_signals=True)
    try:
        await scheduler.run()
    finally:
        await app.close()

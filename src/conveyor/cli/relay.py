"""``conveyor relay --dispatch AMQP_URL``: RabbitMQ dispatch's background roles
alone, for teams that want them outside their workers: the relay (publishes
due jobs, delayed ones and retries as they come due), the reconciler and the
dead-letter handler. Until SIGTERM/SIGINT. Workers keep their own relays
(many relays are safe), so this adds one; it replaces none."""

from __future__ import annotations

import asyncio
import logging
import signal

import click

from conveyor.app import Conveyor
from conveyor.cli.common import backend_options, make_app
from conveyor.cli.worker import LEVELS, log_format_option
from conveyor.logs import LogFormat, setup_logging

ROLES = ("relay", "reconciler", "dead_letters")

logger = logging.getLogger("conveyor.dispatch")


def _roles(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = sorted(set(names) - set(ROLES))
    if unknown or not names:
        raise click.BadParameter(
            f"{', '.join(unknown) or 'none given'}: choose from {', '.join(ROLES)}"
        )
    return names


@click.command("relay")
@click.option(
    "--roles",
    default=",".join(ROLES),
    show_default=True,
    callback=_roles,
    help="Which roles to run, comma-separated.",
)
@click.option("--log-level", type=LEVELS, default="info", show_default=True)
@log_format_option
@backend_options
def relay_command(roles: tuple[str, ...], log_level: str, log_format: LogFormat) -> None:
    """Run RabbitMQ dispatch's relay, reconciler and dead-letter handler only.

    Needs --dispatch (or $CONVEYOR_DISPATCH) and a SQL store (--url: PostgreSQL
    or SQLite). Run one or several: takes are safe with many relays.
    """
    app = make_app()
    if not app.settings.dispatch:
        raise click.UsageError("conveyor relay needs --dispatch AMQP_URL (or $CONVEYOR_DISPATCH)")
    app.backend  # noqa: B018  # builds (does not open) the backend: a bad URL fails here
    setup_logging(log_level, log_format)
    asyncio.run(run_relay(app, roles))


async def run_relay(app: Conveyor, roles: tuple[str, ...]) -> None:
    """Run ``roles`` on ``app``'s store and broker until SIGTERM/SIGINT."""
    from conveyor.dispatch import Dispatcher

    dispatch = app.settings.dispatch
    assert dispatch is not None  # checked by the command
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        backend = await app.connect()
        dispatcher = Dispatcher(
            dispatch,
            backend,
            worker_queue_ttl=app.settings.worker_queue_ttl,
            events=app.events,
            roles=roles,
        )
        await dispatcher.start()
        logger.info("relay started: %s", ", ".join(roles))
        try:
            await stop.wait()
        finally:
            await dispatcher.close()
            logger.info("relay stopped")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await app.close()

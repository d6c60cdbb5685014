"""What the commands share: ``--url``/``--app``, running the async API, output."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import click
from rich.console import Console

from conveyor.app import Conveyor
from conveyor.durations import format_duration, parse_duration
from conveyor.job import Job

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

URL_HELP = (
    "Backend URL, e.g. sqlite:///./conveyor.db, postgresql://host/db, redis://host "
    "(default: $CONVEYOR_URL, then conveyor.toml, then sqlite:///./conveyor.db)."
)
APP_HELP = "Take settings (and task defaults) from this app, as module:attribute."


@dataclass
class State:
    """Options given on the group and on a subcommand; the subcommand's win."""

    url: str | None = None
    app: str | None = None


def _remember(field: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None:
            setattr(ctx.ensure_object(State), field, value)

    return callback


def _export_dispatch(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    # Through the environment, so an --app's own Conveyor(...) takes it too.
    if value:
        os.environ["CONVEYOR_DISPATCH"] = value


def url_option(f: F) -> F:
    f = click.option(
        "--dispatch",
        metavar="AMQP_URL",
        help="RabbitMQ URL that carries dispatch (default: $CONVEYOR_DISPATCH; none).",
        expose_value=False,
        callback=_export_dispatch,
    )(f)
    return click.option(
        "--url",
        metavar="URL",
        help=URL_HELP,
        expose_value=False,
        callback=_remember("url"),
    )(f)


def app_option(f: F) -> F:
    return click.option(
        "--app",
        "app_spec",
        metavar="APP",
        help=APP_HELP,
        expose_value=False,
        callback=_remember("app"),
    )(f)


def backend_options(f: F) -> F:
    """``--url`` and ``--app`` for commands that need no handlers."""
    return url_option(app_option(f))


def json_option(f: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print JSON on stdout and nothing else."
    )(f)


def state() -> State:
    return click.get_current_context().ensure_object(State)


def make_app() -> Conveyor:
    """The app for this command: ``--app`` if given, else ``Conveyor(--url)``."""
    from conveyor.cli.loading import load_app

    current = state()
    if current.app:
        return load_app(current.app, current.url)
    return Conveyor(current.url)


def run(fn: Callable[[Conveyor], Awaitable[T]], creates: bool = False) -> T:
    """Connect this command's app, run ``fn(app)`` on a fresh event loop, close the app.

    Only a command that ``creates`` (enqueues, pauses a queue) may open a store
    that does not exist yet; the others refuse a missing SQLite file, so that a
    mistyped ``--url`` is an error and not a new empty database."""
    app = make_app()
    if not creates:
        require_existing_store(app)

    async def main() -> T:
        async with app:
            return await fn(app)

    return asyncio.run(main())


def require_existing_store(app: Conveyor) -> None:
    """Raise :class:`CommandFailed` when ``app``'s SQLite file does not exist.

    Opening the SQLite backend creates its file (and folders); a read must not."""
    from conveyor.backends.registry import scheme_of
    from conveyor.cli.errors import CommandFailed

    if scheme_of(app.url) != "sqlite":
        return
    from conveyor.backends.sqlite.url import parse_url

    path = parse_url(app.url, app.settings).path
    if not path.is_file():
        raise CommandFailed(
            f"no database at {path} ({app.url}): nothing was created there yet. "
            "Point --url or CONVEYOR_URL at your store (or enqueue a job to create this one)"
        )


# -- parameters --------------------------------------------------------------------


class Duration(click.ParamType):  # type: ignore[type-arg]  # generic since click 8.5; subscripting breaks 8.1
    """Seconds or a duration string: ``1.5``, ``250ms``, ``30s``, ``5m``, ``1h``, ``7d``."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class JsonValue(click.ParamType):  # type: ignore[type-arg]  # generic since click 8.5; subscripting breaks 8.1
    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            self.fail(
                f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})", param, ctx
            )


class PriorityValue(click.ParamType):  # type: ignore[type-arg]  # generic since click 8.5; subscripting breaks 8.1
    """An integer, or a name of :class:`conveyor.Priority` in any case (``high``)."""

    name = "priority"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        from conveyor.task import Priority

        named = getattr(Priority, str(value).strip().upper(), None)
        if isinstance(named, int):
            return named
        try:
            return int(value)
        except ValueError:
            self.fail(
                f"{value!r} is not an integer nor one of critical, high, normal, low", param, ctx
            )


DURATION = Duration()
PRIORITY = PriorityValue()
JSON_VALUE = JsonValue()


def split_list(values: Iterable[str]) -> list[str]:
    """``-q a,b -q c`` → ``["a", "b", "c"]``."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


# -- output --------------------------------------------------------------------------


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


def console(stderr: bool = False) -> Console:
    """A rich console; off a terminal (a pipe, a file, CI) tables keep their natural width."""
    out = Console(highlight=False, stderr=stderr)
    if not out.is_terminal:
        out.width = PIPE_WIDTH
    return out


PIPE_WIDTH = 200


def age(now: float, then: float | None) -> str:
    """``3.0s ago``, ``in 2.0s`` or ``-``."""
    if then is None or then <= 0:
        return "-"
    delta = now - then
    if delta >= 0:
        return f"{format_duration(delta)} ago"
    return f"in {format_duration(-delta)}"


STATE_STYLES = {
    "blocked": "bright_black",
    "waiting": "cyan",
    "delayed": "blue",
    "active": "yellow",
    "completed": "green",
    "failed": "red",
    "cancelled": "magenta",
}


def styled_state(value: str) -> str:
    style = STATE_STYLES.get(value)
    return f"[{style}]{value}[/]" if style else value


def echo_retry(job_id: str, job: Job) -> None:
    """Print the id a dead-letter retry gave, noting on stderr a retry made before."""
    click.echo(job.id)
    if job.duplicate:
        click.echo(f"note: job {job_id} was already retried as {job.id}; nothing new", err=True)

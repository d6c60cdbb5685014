"""Every error the CLI can meet, reported in one place: one line on stderr.

``ConveyorGroup.main`` runs the command tree in click's non-standalone mode and
turns whatever escapes into ``error: …`` and an exit code, the table of
docs/how-to/cli.md: 0 done (also a worker or server stopped by a signal), 1 the
operation failed (not found, refused, a backend that is down), 2 bad input
(usage, a bad value, an APP that cannot be loaded, invalid configuration), 3 a
missing extra or dependency, 130 Ctrl-C during any other command. Bad input
never shows a traceback; an unexpected exception (a bug) shows one only when
``CONVEYOR_DEBUG=1``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from conveyor.errors import ConfigurationError, ConveyorError, MissingDependency, UnknownTask

RUNTIME = 1
USAGE = 2
MISSING = 3
INTERRUPTED = 130


class AppLoadError(ConveyorError):
    """``APP`` (``module:attribute``) could not be imported or is not a ``Conveyor``."""


class CommandFailed(ConveyorError):
    """A command could not do what it was asked (e.g. cancel a finished job)."""


def describe(exc: BaseException) -> tuple[str, int] | None:
    """``(message, exit code)`` for an error the CLI reports in one line, else ``None``."""
    if isinstance(exc, click.UsageError):
        message = exc.format_message()
        if exc.ctx is not None:
            help_option = exc.ctx.help_option_names[0] if exc.ctx.help_option_names else "--help"
            message += f" (try '{exc.ctx.command_path} {help_option}')"
        return message, USAGE
    if isinstance(exc, click.ClickException):
        return exc.format_message(), exc.exit_code
    if isinstance(exc, click.Abort | KeyboardInterrupt):  # a declined prompt, or Ctrl-C
        ctrl_c = any(
            isinstance(e, KeyboardInterrupt) for e in (exc, exc.__cause__, exc.__context__)
        )
        return "aborted", INTERRUPTED if ctrl_c else RUNTIME
    if isinstance(exc, AppLoadError | ConfigurationError | UnknownTask):
        return str(exc), USAGE
    if isinstance(exc, MissingDependency):
        return str(exc), MISSING
    if isinstance(exc, ConveyorError):
        return str(exc) or type(exc).__name__, RUNTIME
    if isinstance(exc, ValueError):  # a value the user gave that the API refused
        return str(exc), USAGE
    if isinstance(exc, OSError):  # a file that cannot be opened, a refused connection
        return str(exc), RUNTIME
    return None


def fail(message: str, code: int, after_prompt: bool = False) -> NoReturn:
    if after_prompt:  # a prompt met the end of its input: end the prompt's line first
        click.echo(err=True)
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


class ConveyorGroup(click.Group):
    """The root group: reports errors (see the module doc) instead of tracebacks."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            result = super().main(args, prog_name, complete_var, False, **extra)
        except SystemExit:
            raise
        except BaseException as exc:
            known = describe(exc)
            if known is None:
                if os.environ.get("CONVEYOR_DEBUG"):
                    raise
                known = (
                    f"unexpected {type(exc).__name__}: {exc} "
                    "(a bug in conveyor? set CONVEYOR_DEBUG=1 to see the traceback)",
                    RUNTIME,
                )
            fail(*known, after_prompt=isinstance(exc.__context__, EOFError))
        sys.exit(result if isinstance(result, int) else 0)

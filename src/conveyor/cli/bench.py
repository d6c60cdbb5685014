"""``conveyor bench``: enqueue and drain throughput and pickup latency on this machine.

The measuring lives in :mod:`conveyor.benchmark`; this module picks the backend,
keeps the run in a namespace of its own, removes that namespace whatever
happens (Ctrl-C included), and prints the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
from collections.abc import Callable, Iterator
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from conveyor import __version__
from conveyor.benchmark import (
    ENQUEUE_BATCH,
    BenchError,
    Figures,
    Scratch,
    masked,
    measure,
    scratch_for,
)
from conveyor.cli.common import console, json_option, print_json, state
from conveyor.errors import ConveyorError
from conveyor.settings import load_settings


def configured_url() -> str | None:
    """``--url``, else a URL that ``CONVEYOR_URL`` or a config file sets; ``None`` when
    nothing does (the default ``./conveyor.db`` is the user's, never the bench's)."""
    url = state().url
    if url is not None:
        return url
    settings = load_settings()
    return settings.url if "url" in settings.model_fields_set else None


def cores() -> int:
    """The cores this process may run on (fewer than the machine's in a container)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def report_object(
    scratch: Scratch, figures: Figures, samples: int, concurrency: int
) -> dict[str, Any]:
    return {
        "conveyor": __version__,
        "backend": scratch.backend,
        "url": masked(scratch.url),
        "namespace": scratch.where,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(terse=True),
        "cores": cores(),
        "jobs": figures.jobs,
        "batch": min(ENQUEUE_BATCH, figures.jobs),
        "concurrency": concurrency,
        "samples": samples,
        "enqueue": {
            "seconds": round(figures.enqueue_seconds, 4),
            "jobs_per_s": round(figures.enqueue_per_s, 1),
        },
        "drain": {
            "seconds": round(figures.drain_seconds, 4),
            "jobs_per_s": round(figures.drain_per_s, 1),
        },
        "pickup_ms": {key: round(value, 3) for key, value in figures.pickup_ms().items()},
    }


def report_table(data: dict[str, Any]) -> Table:
    table = Table(title="conveyor bench", title_justify="left", show_header=False)
    table.add_column("", style="bold", no_wrap=True)
    table.add_column("", justify="right", no_wrap=True)
    table.add_column("", style="dim")
    table.add_row("backend", escape(data["backend"]), escape(data["namespace"]))
    table.add_row("url", "", escape(data["url"]))
    table.add_row("python", escape(data["python"]), escape(data["platform"]))
    table.add_row("cores", str(data["cores"]), f"conveyor {escape(data['conveyor'])}")
    table.add_section()
    jobs, enqueue, drain = data["jobs"], data["enqueue"], data["drain"]
    table.add_row(
        "enqueue",
        f"{enqueue['jobs_per_s']:,.0f} jobs/s",
        f"{jobs:,} jobs in {enqueue['seconds']:.2f}s, enqueue_many in batches of {data['batch']:,}",
    )
    table.add_row(
        "drain",
        f"{drain['jobs_per_s']:,.0f} jobs/s",
        f"{jobs:,} no-op async jobs in {drain['seconds']:.2f}s, one worker in this "
        f"process, concurrency {data['concurrency']}",
    )
    table.add_section()
    pickup = data["pickup_ms"]
    for key in ("p50", "p90", "p99", "max"):
        detail = (
            f"enqueue to handler start, {data['samples']} jobs one at a time, worker idle"
            if key == "p50"
            else ""
        )
        table.add_row(f"pickup {key}", f"{pickup[key]:.2f} ms", detail)
    return table


@contextlib.contextmanager
def phases(out: Console, quiet: bool) -> Iterator[Callable[[str], None]]:
    """A spinner naming the current phase, on a terminal only."""
    if quiet or not out.is_terminal:
        yield lambda phase: None
        return
    with out.status("conveyor bench") as status:
        yield lambda phase: status.update(f"conveyor bench: {phase}")


def run_in_scratch(
    scratch: Scratch, jobs: int, samples: int, concurrency: int, report: Callable[[str], None]
) -> tuple[Figures, Exception | None]:
    """Measure in ``scratch``, then remove it, also after an error or Ctrl-C.

    Returns the figures and the error that kept the namespace from being removed,
    if any: the figures are still worth printing."""
    try:
        figures = asyncio.run(
            measure(scratch, jobs=jobs, samples=samples, concurrency=concurrency, report=report)
        )
    except BaseException as exc:
        # A server that refused the connection holds nothing of ours (migrations
        # are transactional), and trying again would only add a second error;
        # anything else, Ctrl-C included, may have left data behind.
        if scratch.opened or not scratch.remote or not isinstance(exc, ConveyorError):
            try:
                asyncio.run(scratch.remove())
            except Exception as cleanup:  # the first error is the one to report
                click.echo(f"warning: could not remove {scratch.where}: {cleanup}", err=True)
        raise
    try:
        asyncio.run(scratch.remove())
    except Exception as cleanup:
        return figures, cleanup
    return figures, None


@click.command("bench")
@click.option(
    "--jobs",
    "-n",
    type=click.IntRange(1),
    default=10_000,
    show_default=True,
    help="Jobs to enqueue and drain.",
)
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(1),
    default=50,
    show_default=True,
    help="Slots of the worker that drains them.",
)
@click.option(
    "--samples",
    type=click.IntRange(1),
    default=200,
    show_default=True,
    help="Jobs sent one at a time to measure pickup latency.",
)
@json_option
@click.option(
    "--url",
    metavar="URL",
    help="Backend to measure (default: $CONVEYOR_URL, then conveyor.toml, then a "
    "temporary SQLite file).",
)
def bench_command(
    jobs: int, concurrency: int, samples: int, as_json: bool, url: str | None
) -> None:
    """Throughput and pickup latency on this machine and backend.

    Runs on the backend of --url / $CONVEYOR_URL / conveyor.toml in a namespace
    of its own (a new PostgreSQL schema, a new Redis key prefix, a new SQLite
    file) and deletes it afterwards; with nothing configured, on a temporary
    SQLite file. Never on an existing SQLite database. --json prints one object.
    """
    if url is not None:  # as --url does on every command: the one after the command wins
        state().url = url
    scratch = scratch_for(configured_url())
    out = console()
    with phases(out, as_json) as report:
        figures, left_behind = run_in_scratch(scratch, jobs, samples, concurrency, report)
    data = report_object(scratch, figures, samples, concurrency)
    if as_json:
        print_json(data)
    else:
        out.print(report_table(data))
    if left_behind is not None:
        raise BenchError(f"could not remove {scratch.where}: {left_behind}")

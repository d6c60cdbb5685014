"""``conveyor queues [pause/resume NAME]``."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from conveyor.app import Conveyor
from conveyor.cli.common import (
    STATE_STYLES,
    backend_options,
    console,
    json_option,
    print_json,
    run,
)
from conveyor.durations import format_duration
from conveyor.job import JobState


async def queue_rows(app: Conveyor) -> list[dict[str, Any]]:
    """One object per queue: its options and ``counts`` per state."""
    infos = {info.name: info for info in await app.queues()}
    counts = await app.stats()
    zero = {state.value: 0 for state in JobState}
    rows = []
    for name in sorted(set(infos) | set(counts)):
        info = infos.get(name)
        row: dict[str, Any] = (
            info.to_dict()
            if info
            else {"name": name, "paused": False, "max_size": None, "ttl": None}
        )
        row["counts"] = {**zero, **counts.get(name, {})}
        rows.append(row)
    return rows


@click.group("queues", invoke_without_command=True)
@json_option
@backend_options
@click.pass_context
def queues_group(ctx: click.Context, as_json: bool) -> None:
    """Counts per queue and state; pause and resume queues."""
    if ctx.invoked_subcommand is not None:
        return
    rows = run(queue_rows)
    if as_json:
        print_json(rows)
        return
    out = console()
    if not rows:
        out.print("no queues yet")
        return
    table = Table()
    table.add_column("queue", no_wrap=True)
    for state in JobState:
        table.add_column(state.value, justify="right", style=STATE_STYLES[state.value])
    table.add_column("paused")
    table.add_column("max size", justify="right")
    table.add_column("ttl", justify="right")
    for row in rows:
        table.add_row(
            escape(row["name"]),
            *(str(row["counts"][state.value]) for state in JobState),
            "[bold red]paused[/]" if row["paused"] else "",
            str(row["max_size"]) if row["max_size"] is not None else "-",
            format_duration(row["ttl"]) if row["ttl"] is not None else "-",
        )
    out.print(table)


@queues_group.command("pause")
@click.argument("name")
@backend_options
def pause_queue(name: str) -> None:
    """Stop workers claiming from a queue (enqueues still work)."""

    async def go(app: Conveyor) -> None:
        await app.pause_queue(name)

    run(go, creates=True)
    click.echo(f"paused queue {name!r}")


@queues_group.command("resume")
@click.argument("name")
@backend_options
def resume_queue(name: str) -> None:
    """Let workers claim from a paused queue again."""

    async def go(app: Conveyor) -> None:
        await app.resume_queue(name)

    run(go, creates=True)
    click.echo(f"resumed queue {name!r}")

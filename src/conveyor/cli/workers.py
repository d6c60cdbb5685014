"""``conveyor workers``: live workers, from their heartbeats."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from conveyor.app import Conveyor
from conveyor.cli.common import age, backend_options, console, json_option, print_json, run


@click.command("workers")
@click.option("--all", "show_all", is_flag=True, help="Also list workers that stopped beating.")
@json_option
@backend_options
def workers_command(show_all: bool, as_json: bool) -> None:
    """Workers from heartbeats: id, host, pid, queues, concurrency, active, last seen."""

    async def go(app: Conveyor) -> tuple[float, list[dict[str, Any]]]:
        now = await (await app.connect()).now()
        rows = [
            {**info.to_dict(), "alive": alive}
            for info, alive in await app.workers()
            if alive or show_all
        ]
        rows.sort(key=lambda row: (row["host"], row["started_at"], row["id"]))
        return now, rows

    now, rows = run(go)
    if as_json:
        print_json(rows)
        return
    out = console()
    if not rows:
        out.print("no live workers" + ("" if show_all else " (--all shows dead ones too)"))
        return
    table = Table()
    table.add_column("id", no_wrap=True)
    table.add_column("host", no_wrap=True)
    table.add_column("pid", justify="right")
    table.add_column("queues", overflow="fold")
    table.add_column("conc.", justify="right")
    table.add_column("active", justify="right")
    table.add_column("started")
    table.add_column("last seen")
    table.add_column("alive")
    for row in rows:
        own = f"worker.{row['id']}"
        queues = [q for q in row["queues"] if q != own]
        table.add_row(
            escape(row["id"]),
            escape(row["host"]),
            str(row["pid"]),
            escape(",".join(queues)),
            str(row["concurrency"]),
            str(row["active"]),
            age(now, row["started_at"]),
            age(now, row["last_seen"]),
            "[green]yes[/]" if row["alive"] else "[red]no[/]",
        )
    out.print(table)

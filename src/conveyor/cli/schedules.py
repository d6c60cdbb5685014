"""``conveyor schedules list/pause/resume/trigger/set-cron``: stored schedules.

Every change is persisted in the backend: all schedulers obey it at once and
it survives restarts (see docs/how-to/schedules.md).
"""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from conveyor.app import Conveyor
from conveyor.backends.base import ScheduleRecord
from conveyor.cli.common import age, backend_options, console, json_option, print_json, run
from conveyor.durations import format_duration


def describe_timing(record: ScheduleRecord) -> str:
    timing = (
        record.cron if record.cron is not None else f"every {format_duration(record.every or 0)}"
    )
    overridden = (record.cron, record.every) != (record.spec.cron, record.spec.every)
    return timing + (" (set-cron)" if overridden else "")


@click.group("schedules", invoke_without_command=True)
@click.pass_context
def schedules_group(ctx: click.Context) -> None:
    """Stored schedules: list, pause, resume, trigger now, change the cron."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_schedules)


@schedules_group.command("list")
@json_option
@backend_options
def list_schedules(as_json: bool = False) -> None:
    """Every schedule: timing, state, next and last fire, fire count."""

    async def go(app: Conveyor) -> tuple[float, list[ScheduleRecord]]:
        return await (await app.connect()).now(), await app.schedules.list()

    now, records = run(go)
    if as_json:
        print_json([record.to_dict() for record in records])
        return
    out = console()
    if not records:
        out.print("no schedules (a scheduler stores them when it starts)")
        return
    table = Table()
    table.add_column("name", no_wrap=True)
    table.add_column("task", no_wrap=True)
    table.add_column("timing")
    table.add_column("zone")
    table.add_column("state")
    table.add_column("next fire")
    table.add_column("last fire")
    table.add_column("fires", justify="right")
    for record in records:
        if record.paused:
            status = "[yellow]paused[/]"
        elif record.next_fire_at is None:
            status = "[dim]finished[/]"
        else:
            status = "[green]active[/]"
        table.add_row(
            escape(record.name),
            escape(record.spec.task),
            escape(describe_timing(record)),
            escape(record.spec.timezone),
            status,
            age(now, record.next_fire_at) if record.next_fire_at is not None else "-",
            age(now, record.last_fire_at),
            str(record.fires) + (f"/{record.spec.limit}" if record.spec.limit else ""),
        )
    out.print(table)


@schedules_group.command("pause")
@click.argument("name")
@backend_options
def pause_schedule(name: str) -> None:
    """Stop firing NAME until it is resumed (every scheduler obeys)."""
    run(lambda app: app.schedules.pause(name), creates=True)
    click.echo(f"paused schedule {name}")


@schedules_group.command("resume")
@click.argument("name")
@backend_options
def resume_schedule(name: str) -> None:
    """Fire NAME again; slots missed while paused follow its misfire policy."""
    record = run(lambda app: app.schedules.resume(name), creates=True)
    following = "never (finished)"
    if record.next_fire_at is not None:
        following = ScheduleRecord.to_dict(record)["next_fire_iso"]
    click.echo(f"resumed schedule {name}; next fire {following}")


@schedules_group.command("trigger")
@click.argument("name")
@backend_options
def trigger_schedule(name: str) -> None:
    """Enqueue one run of NAME now (outside its slots); prints the job id."""
    job = run(lambda app: app.schedules.trigger(name), creates=True)
    click.echo(job.id)


@schedules_group.command("set-cron")
@click.argument("name")
@click.argument("cron", required=False)
@click.option("--every", metavar="DURATION", help="An interval instead of a cron (e.g. 30s).")
@backend_options
def set_cron(name: str, cron: str | None, every: str | None) -> None:
    """Change NAME's cron (or --every interval); persisted until the code changes it.

    CRON has 5 fields, or 6 with seconds first; quote it: '*/5 * * * *'.
    """
    if (cron is None) == (every is None):
        raise click.UsageError("give a CRON expression or --every, not both or neither")

    async def go(app: Conveyor) -> ScheduleRecord:
        return await app.schedules.set_cron(name, cron=cron, every=every)

    record = run(go, creates=True)
    following = record.to_dict()["next_fire_iso"] or "never (finished)"
    click.echo(f"schedule {name}: {describe_timing(record)}; next fire {following}")

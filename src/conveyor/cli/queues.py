"""``conveyor queues [pause/resume NAME]``."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from conveyor.app import Conveyor
from conveyor.backends.base import QueueInfo
from conveyor.cli.common import (
    STATE_STYLES,
    backend_options,
    console,
    json_option,
    print_json,
    run,
)
from conveyor.durations import format_duration
from conveyor.flow import KeyUsage, RateUsage
from conveyor.job import JobState


async def queue_rows(app: Conveyor) -> list[dict[str, Any]]:
    """One object per queue: its options, ``counts`` per state and, for a fair
    queue, ``tenants`` (waiting and active jobs of the busiest tenants)."""
    infos = {info.name: info for info in await app.queues()}
    counts = await app.stats()
    tenants = await app.tenant_usage()
    zero = {state.value: 0 for state in JobState}
    rows = []
    for name in sorted(set(infos) | set(counts)):
        row: dict[str, Any] = (infos.get(name) or QueueInfo(name)).to_dict()
        row["counts"] = {**zero, **counts.get(name, {})}
        if name in tenants:
            row["tenants"] = [count.to_dict() for count in tenants[name]]
        rows.append(row)
    if app.settings.dispatch:
        await add_broker_depths(app.settings.dispatch, rows)
    return rows


async def add_broker_depths(dispatch: str, rows: list[dict[str, Any]]) -> None:
    """``broker``: each queue's broker queue (ready messages and consumers; None
    when not declared yet), or ``broker_error`` when the broker did not answer."""
    from conveyor.dispatch.probe import BrokerProbe

    probe = BrokerProbe(dispatch)
    try:
        depths = await probe.depths(row["name"] for row in rows)
    except Exception as exc:  # shown beside the store's counts, which still stand
        for row in rows:
            row["broker"] = None
            row["broker_error"] = f"broker: {exc or type(exc).__name__}"
        return
    finally:
        await probe.close()
    for row in rows:
        depth = depths[row["name"]]
        row["broker"] = (
            {"messages": depth.messages, "consumers": depth.consumers} if depth else None
        )


@click.group("queues", invoke_without_command=True)
@json_option
@backend_options
@click.pass_context
def queues_group(ctx: click.Context, as_json: bool) -> None:
    """Counts per queue and state; pause and resume queues."""
    if ctx.invoked_subcommand is not None:
        return
    rows, keys, rates = run(_queues_and_flow)
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
    table.add_column("fairness")
    dispatch = any("broker" in row for row in rows)
    if dispatch:
        table.add_column("broker", justify="right")  # ready messages in RabbitMQ
    for row in rows:
        cells = [
            escape(row["name"]),
            *(str(row["counts"][state.value]) for state in JobState),
            "[bold red]paused[/]" if row["paused"] else "",
            str(row["max_size"]) if row["max_size"] is not None else "-",
            format_duration(row["ttl"]) if row["ttl"] is not None else "-",
            escape(fairness_text(row)),
        ]
        if dispatch:
            cells.append(_broker_cell(row))
        table.add_row(*cells)
    out.print(table)
    errors = {row["broker_error"] for row in rows if "broker_error" in row}
    for error in sorted(errors):
        out.print(f"[yellow]{escape(error)}[/]")
    _print_keys(out, keys)
    _print_rates(out, rates)
    _print_tenants(out, rows)


def fairness_text(row: dict[str, Any]) -> str:
    """``tenant`` and the weights of a fair queue (``tenant org-1=3``); ``-`` if plain."""
    if row.get("fairness") is None:
        return "-"
    weights = " ".join(f"{t}={w:g}" for t, w in sorted(row.get("weights", {}).items()))
    return f"{row['fairness']} {weights}".strip()


def _print_tenants(out: Console, rows: list[dict[str, Any]]) -> None:
    """Waiting and running jobs per tenant of each fair queue, busiest first."""
    for row in rows:
        if "tenants" not in row:
            continue
        table = Table(title=f"fair queue {escape(row['name'])}: jobs per tenant")
        table.add_column("tenant")
        table.add_column("waiting", justify="right")
        table.add_column("active", justify="right")
        for count in row["tenants"]:
            tenant = count["tenant"]
            name = escape(tenant) if tenant is not None else "[dim](no tenant)[/]"
            table.add_row(name, str(count["waiting"]), str(count["active"]))
        if not row["tenants"]:
            table.add_row("[dim](none waiting)[/]", "0", "0")
        out.print(table)


async def _queues_and_flow(
    app: Conveyor,
) -> tuple[list[dict[str, Any]], list[KeyUsage], list[RateUsage]]:
    return await queue_rows(app), await app.key_usage(), await app.rate_usage()


def _print_keys(out: Console, keys: list[KeyUsage]) -> None:
    """Running (and waiting) jobs per concurrency key, when any task is
    key-capped or running keyed."""
    if not keys:
        return
    table = Table(title="jobs per concurrency key")
    table.add_column("task", no_wrap=True)
    table.add_column("key")
    table.add_column("running", justify="right")
    table.add_column("waiting", justify="right")
    table.add_column("cap", justify="right")
    for row in keys:
        key = escape(row.key) if row.key is not None else "[dim](no key)[/]"
        cap = str(row.cap) if row.cap is not None else "-"
        waiting = str(row.waiting) if row.waiting is not None else "-"
        table.add_row(escape(row.task), key, str(row.running), waiting, cap)
    out.print(table)


def _print_rates(out: Console, rates: list[RateUsage]) -> None:
    """Starts in the current window per rate-limit key, against the limit."""
    if not rates:
        return
    table = Table(title="starts per rate-limit key (current window)")
    table.add_column("task", no_wrap=True)
    table.add_column("key")
    table.add_column("used", justify="right")
    table.add_column("limit", justify="right")
    table.add_column("per", justify="right")
    for row in rates:
        key = escape(row.key) if row.key is not None else "[dim](no key)[/]"
        used = f"[bold red]{row.used}[/]" if row.used >= row.limit else str(row.used)
        table.add_row(escape(row.task), key, used, str(row.limit), format_duration(row.period))
    out.print(table)


@queues_group.command("keys")
@json_option
@backend_options
def queue_keys(as_json: bool) -> None:
    """Running and waiting jobs per concurrency key (key_concurrency), busiest first."""

    async def go(app: Conveyor) -> list[KeyUsage]:
        return await app.key_usage()

    keys = run(go)
    if as_json:
        print_json([row.to_dict() for row in keys])
        return
    if not keys:
        console().print("no job with a concurrency key is running or waiting")
        return
    _print_keys(console(), keys)


@queues_group.command("rates")
@json_option
@backend_options
def queue_rates(as_json: bool) -> None:
    """Starts in the current window per rate_limit_key, fullest first."""

    async def go(app: Conveyor) -> list[RateUsage]:
        return await app.rate_usage()

    rates = run(go)
    if as_json:
        print_json([row.to_dict() for row in rates])
        return
    if not rates:
        console().print("no rate-limit key has a start in its current window")
        return
    _print_rates(console(), rates)


def _broker_cell(row: dict[str, Any]) -> str:
    if "broker_error" in row:
        return "[yellow]?[/]"
    depth = row.get("broker")
    return str(depth["messages"]) if depth is not None else "-"


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

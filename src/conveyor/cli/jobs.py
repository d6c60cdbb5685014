"""``conveyor jobs list/show/cancel/retry``."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from conveyor.app import Conveyor
from conveyor.cli.common import (
    F,
    age,
    backend_options,
    console,
    echo_retry,
    json_option,
    print_json,
    run,
    styled_state,
)
from conveyor.cli.errors import CommandFailed
from conveyor.errors import JobNotFound
from conveyor.job import FailureReason, Job, JobState

STATES = click.Choice([s.value for s in JobState])
REASONS = click.Choice([r.value for r in FailureReason])


def filter_options(f: F) -> F:
    """``--queue --task --tenant --limit --offset``, shared by ``jobs list`` and ``dlq list``."""
    for option in reversed(
        [
            click.option("--queue", help="Only jobs in this queue."),
            click.option("--task", help="Only jobs of this task."),
            click.option("--tenant", help="Only jobs of this tenant."),
            click.option(
                "--limit", type=click.IntRange(1), default=50, show_default=True, help="At most."
            ),
            click.option(
                "--offset", type=click.IntRange(0), default=0, help="Skip this many (paging)."
            ),
        ]
    ):
        f = option(f)
    return f


def _detail(job: Job) -> str:
    """The one thing worth knowing at a glance: the error, the progress or the result."""
    if job.error is not None and job.state in (JobState.FAILED, JobState.DELAYED):
        return f"{job.error.type}: {job.error.message}"
    if job.state is JobState.ACTIVE and job.progress is not None:
        return f"progress {_json(job.progress)}"
    if job.state is JobState.COMPLETED and job.result is not None:
        return f"-> {_json(job.result)}"
    return ""


def jobs_table(jobs: list[Job], now: float) -> Table:
    tenants = any(job.tenant for job in jobs)
    table = Table()
    table.add_column("id", no_wrap=True, min_width=26)
    table.add_column("task", no_wrap=True)
    table.add_column("queue", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("tries", justify="right", no_wrap=True)
    if tenants:
        table.add_column("tenant", no_wrap=True)
    table.add_column("created", no_wrap=True)
    table.add_column("detail", no_wrap=True, overflow="ellipsis", max_width=50)
    for job in jobs:
        state = job.state.value
        if job.failure_reason is not None:
            state += f" ({job.failure_reason.value})"
        cells = [
            job.id,
            escape(job.task),
            escape(job.queue),
            styled_state(state),
            f"{job.attempts}/{job.max_attempts}",
            *([escape(job.tenant or "")] if tenants else []),
            age(now, job.created_at),
        ]
        table.add_row(*cells, Text(_detail(job)))
    return table


def print_jobs(jobs: list[Job], now: float, offset: int, total: int, what: str) -> None:
    """The table, and which slice of ``total`` matches it shows."""
    out = console()
    if not jobs:
        out.print(f"no {what}" + (f" past the first {offset}" if offset else ""))
        return
    out.print(jobs_table(jobs, now))
    if total > len(jobs):
        shown = f"{offset + 1}-{offset + len(jobs)}" if offset else str(len(jobs))
        out.print(f"showing {shown} of {total} {what} (use --limit / --offset for more)")


def print_job(job: Job, now: float) -> None:
    out = console()
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column(overflow="fold")

    def row(name: str, value: Any) -> None:
        if value not in (None, "", [], {}):
            table.add_row(name, value if isinstance(value, Text) else Text(str(value)))

    state = job.state.value + (f" ({job.failure_reason.value})" if job.failure_reason else "")
    row("id", job.id)
    row("task", job.task)
    row("queue", job.queue)
    table.add_row("state", styled_state(state))
    row("attempts", f"{job.attempts}/{job.max_attempts}")
    row("priority", job.priority)
    row("tenant", job.tenant)
    row("created", age(now, job.created_at))
    if job.state in (JobState.WAITING, JobState.DELAYED):
        row("run at", age(now, job.run_at))
    row("started", age(now, job.started_at) if job.started_at else None)
    row("finished", age(now, job.finished_at) if job.finished_at else None)
    row("worker", job.worker_id)
    row("idempotency key", job.idempotency_key)
    row("payload", _json(job.payload))
    row("metadata", _json(job.metadata) if job.metadata else None)
    row("progress", _json(job.progress) if job.progress is not None else None)
    row("result", _json(job.result) if job.result is not None else None)
    row("retry of", job.retry_of)
    row("retried as", job.retried_as)
    for err in job.errors:
        if job.error is None or err.attempt != job.error.attempt:
            row(f"attempt {err.attempt}", f"{err.type}: {err.message}")
    if job.error is not None:
        row("error", f"{job.error.type}: {job.error.message}")
    out.print(table)
    if job.error is not None and job.error.traceback and job.state is JobState.FAILED:
        out.print(Text(job.error.traceback.rstrip(), style="dim"))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


async def fetch(app: Conveyor, job_id: str) -> Job:
    job = await app.get_job(job_id)
    if job is None:
        raise JobNotFound(job_id)
    return job


@click.group("jobs")
def jobs_group() -> None:
    """Inspect jobs and act on them."""


@jobs_group.command("list")
@click.option("--state", "states", type=STATES, multiple=True, help="Only this state (repeatable).")
@click.option("--reason", type=REASONS, help="Only failed jobs with this failure reason.")
@filter_options
@json_option
@backend_options
def list_jobs(
    states: tuple[str, ...],
    reason: str | None,
    queue: str | None,
    task: str | None,
    tenant: str | None,
    limit: int,
    offset: int,
    as_json: bool,
) -> None:
    """List jobs, newest first."""

    async def go(app: Conveyor) -> None:
        filters = {"queue": queue, "task": task, "tenant": tenant, "reason": reason}
        await show_list(app, list(states) or None, filters, limit, offset, as_json, "jobs")

    run(go)


async def show_list(
    app: Conveyor,
    states: list[str] | str | None,
    filters: dict[str, Any],
    limit: int,
    offset: int,
    as_json: bool,
    what: str,
) -> None:
    """One page of jobs as JSON or a table; the total is counted only past a full page."""
    jobs = await app.list_jobs(states, limit=limit, offset=offset, **filters)
    if as_json:
        print_json([job.to_dict() for job in jobs])
        return
    total = offset + len(jobs)
    if len(jobs) >= limit:
        total = await app.count_jobs(states, **filters)
    print_jobs(jobs, await app.backend.now(), offset, total, what)


@jobs_group.command("show")
@click.argument("job_id", metavar="ID")
@json_option
@backend_options
def show_job(job_id: str, as_json: bool) -> None:
    """Show one job: state, payload, result, progress, errors."""

    async def go(app: Conveyor) -> None:
        job = await fetch(app, job_id)
        if as_json:
            print_json(job.to_dict())
        else:
            print_job(job, await app.backend.now())

    run(go)


@jobs_group.command("cancel")
@click.argument("job_id", metavar="ID")
@backend_options
def cancel_job(job_id: str) -> None:
    """Cancel a job: waiting/delayed at once; an active one is signalled."""

    async def go(app: Conveyor) -> None:
        job = await app.cancel(job_id)
        if job.state is JobState.CANCELLED:
            click.echo(f"cancelled {job.id}")
        elif job.state is JobState.ACTIVE:
            click.echo(f"cancel requested for {job.id}: it is running and stops at its next check")
        else:
            raise CommandFailed(f"job {job.id} is already {job.state.value}; nothing to cancel")

    run(go)


@jobs_group.command("retry")
@click.argument("job_id", metavar="ID")
@backend_options
def retry_job(job_id: str) -> None:
    """Retry a failed job: a fresh copy with new attempts (prints the new id).
    Once per job, like ``conveyor dlq retry``."""

    async def go(app: Conveyor) -> None:
        echo_retry(job_id, await app.dlq.retry(job_id))

    run(go)

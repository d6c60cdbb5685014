"""``conveyor dlq list/show/retry/delete/purge``: the dead-letter queue (failed jobs)."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from conveyor.app import Conveyor
from conveyor.cli.common import (
    DURATION,
    backend_options,
    echo_retry,
    json_option,
    print_json,
    run,
)
from conveyor.cli.errors import CommandFailed
from conveyor.cli.jobs import REASONS, fetch, filter_options, print_job, show_list
from conveyor.durations import format_duration
from conveyor.filters import job_filter
from conveyor.job import JobState


@click.group("dlq")
def dlq_group() -> None:
    """The dead-letter queue: jobs that ended failed."""


@dlq_group.command("list")
@click.option("--reason", type=REASONS, help="Only this failure reason.")
@filter_options
@json_option
@backend_options
def list_dead(
    reason: str | None,
    queue: str | None,
    task: str | None,
    tenant: str | None,
    limit: int,
    offset: int,
    as_json: bool,
) -> None:
    """List dead letters, newest first."""

    async def go(app: Conveyor) -> None:
        filters = {"queue": queue, "task": task, "tenant": tenant, "reason": reason}
        await show_list(app, "failed", filters, limit, offset, as_json, "dead letters")

    run(go)


@dlq_group.command("show")
@click.argument("job_id", metavar="ID")
@json_option
@backend_options
def show_dead(job_id: str, as_json: bool) -> None:
    """Show a dead letter with its errors and the last traceback."""

    async def go(app: Conveyor) -> None:
        job = await fetch(app, job_id)
        if job.state is not JobState.FAILED:
            raise CommandFailed(f"job {job_id} is {job.state.value}, not in the dead-letter queue")
        if as_json:
            print_json(job.to_dict())
        else:
            print_job(job, await app.backend.now())

    run(go)


@dlq_group.command("retry")
@click.argument("job_ids", metavar="ID...", nargs=-1, required=True)
@backend_options
def retry_dead(job_ids: tuple[str, ...]) -> None:
    """Retry dead letters: each becomes a fresh job (the new ids are printed).

    A dead letter is retried once: for one retried before, the id of that retry
    is printed again (with a note on stderr) and nothing new is enqueued."""

    async def go(app: Conveyor) -> None:
        for job_id in job_ids:
            echo_retry(job_id, await app.dlq.retry(job_id))

    run(go)


@dlq_group.command("delete")
@click.argument("job_ids", metavar="ID...", nargs=-1, required=True)
@backend_options
def delete_dead(job_ids: tuple[str, ...]) -> None:
    """Delete dead letters by id."""

    async def go(app: Conveyor) -> None:
        for job_id in job_ids:
            await app.dlq.delete(job_id)
        click.echo(f"deleted {len(job_ids)} dead letter(s)")

    run(go)


@dlq_group.command("purge")
@click.option("--task", help="Only this task.")
@click.option("--queue", help="Only this queue.")
@click.option("--tenant", help="Only this tenant.")
@click.option("--reason", type=REASONS, help="Only this failure reason.")
@click.option(
    "--older-than", type=DURATION, metavar="AGE", help="Only those failed longer ago (e.g. 7d)."
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@backend_options
def purge_dead(
    task: str | None,
    queue: str | None,
    tenant: str | None,
    reason: str | None,
    older_than: float | None,
    yes: bool,
) -> None:
    """Delete every dead letter matching the filters (all of them without filters)."""

    async def go(app: Conveyor) -> None:
        backend = await app.connect()
        cutoff = None
        if older_than is not None:
            cutoff = datetime.fromtimestamp(await backend.now() - older_than, tz=UTC)
        filters = {"task": task, "queue": queue, "tenant": tenant, "reason": reason}
        before = cutoff.timestamp() if cutoff is not None else None
        where = job_filter(JobState.FAILED, **filters, finished_before=before)
        count = await backend.count_jobs(where)
        if count == 0:
            click.echo("no dead letters match; nothing to purge")
            return
        described = ", ".join(f"{name}={value}" for name, value in filters.items() if value)
        if older_than is not None:
            described += (", " if described else "") + f"older than {format_duration(older_than)}"
        what = f"{count} dead letter(s)" + (f" ({described})" if described else "")
        if not yes:
            click.confirm(f"Delete {what}?", abort=True, err=True)
        purged = await app.dlq.purge(**filters, older_than=cutoff)
        click.echo(f"purged {purged} dead letter(s)")

    run(go)

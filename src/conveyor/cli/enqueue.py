"""``conveyor enqueue TASK``: enqueue one job and print its id."""

from __future__ import annotations

from typing import Any

import click

from conveyor.app import Conveyor
from conveyor.cli.common import (
    DURATION,
    JSON_VALUE,
    PRIORITY,
    backend_options,
    print_json,
    run,
    state,
)
from conveyor.producer import check_task_known


@click.command("enqueue")
@click.argument("task")
@click.option(
    "--payload",
    "-p",
    type=JSON_VALUE,
    default=None,
    metavar="JSON",
    help='The payload, a JSON object (e.g. \'{"to": "a@b.c"}\'); default {}.',
)
@click.option("--delay", type=DURATION, help="Run after this long (e.g. 30s, 5m).")
@click.option(
    "--priority",
    type=PRIORITY,
    help="Higher runs first: an integer or critical (20), high (10), normal (0), low (-10).",
)
@click.option("--key", "idempotency_key", help="Idempotency key: the same key gives the same job.")
@click.option("--queue", help="Queue (default: the task's queue with --app, else 'default').")
@click.option("--tenant", help="Tenant to file the job under.")
@click.option("--attempts", type=click.IntRange(1), help="Most attempts before dead-lettering.")
@click.option("--timeout", type=DURATION, help="Per-attempt time limit.")
@click.option("--ttl", type=DURATION, help="Fail as expired if still waiting after this long.")
@click.option("--concurrency-key", help="The key the task's key_concurrency counts this job under.")
@click.option(
    "--rate-limit-key", help="The window the task's per-key rate limit counts this job's start in."
)
@click.option(
    "--debounce",
    type=DURATION,
    help="With --key: replace the key's job that has not started and run it after this long.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON instead of its id.")
@backend_options
def enqueue_command(task: str, payload: Any, as_json: bool, **options: Any) -> None:
    """Enqueue one TASK job; prints its id.

    With --app, TASK must be one of the app's tasks (as the HTTP API checks).
    Without it the CLI cannot know the tasks: any name is accepted, and a job
    that no worker knows dead-letters later as unknown_task.
    """
    chosen = {name: value for name, value in options.items() if value is not None}

    async def go(app: Conveyor) -> None:
        if state().app:
            check_task_known(app.tasks, task)
        job = await app.enqueue(task, payload, **chosen)
        if as_json:
            print_json(job.to_dict())
            return
        click.echo(job.id)
        if job.duplicate:
            click.echo(
                f"note: key {job.idempotency_key!r} already had this job ({job.state.value}); "
                "nothing new was enqueued",
                err=True,
            )

    run(go, creates=True)

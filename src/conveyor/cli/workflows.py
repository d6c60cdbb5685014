"""``conveyor workflows show/cancel``."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from conveyor.app import Conveyor
from conveyor.cli.common import backend_options, console, json_option, print_json, run
from conveyor.cli.common import styled_state as styled
from conveyor.cli.errors import CommandFailed
from conveyor.cli.jobs import _detail
from conveyor.job import TERMINAL_STATES
from conveyor.workflow import Workflow


async def fetch(app: Conveyor, workflow_id: str) -> Workflow:
    workflow = await app.get_workflow(workflow_id)
    if workflow is None:
        raise CommandFailed(f"no workflow with id {workflow_id!r}")
    return workflow


def as_dict(workflow: Workflow) -> dict[str, Any]:
    """The shape of ``GET /api/v1/workflows/{id}``."""
    return {
        "id": workflow.id,
        "state": workflow.state.value,
        "jobs": [job.to_dict() for job in workflow.jobs],
    }


def print_workflow(workflow: Workflow) -> None:
    """A header (state, progress) and one row per step, in start order; ``after``
    names the steps it waits for by their row number."""
    jobs = workflow.jobs
    finished = sum(job.state in TERMINAL_STATES for job in jobs)
    out = console()
    out.print(
        f"workflow {workflow.id}: {styled(workflow.state.value)}, {finished}/{len(jobs)} finished"
    )
    number = {job.id: i for i, job in enumerate(jobs, 1)}
    table = Table()
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("id", no_wrap=True, min_width=26)
    table.add_column("task", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("after", no_wrap=True)
    table.add_column("detail", no_wrap=True, overflow="ellipsis", max_width=50)
    for i, job in enumerate(jobs, 1):
        state = job.state.value
        if job.failure_reason is not None:
            state += f" ({job.failure_reason.value})"
        after = ",".join(str(number.get(dep, dep)) for dep in job.depends_on)
        table.add_row(str(i), job.id, escape(job.task), styled(state), after, Text(_detail(job)))
    out.print(table)


@click.group("workflows")
def workflows_group() -> None:
    """Inspect workflows (chains, groups, chords) and cancel them."""


@workflows_group.command("show")
@click.argument("workflow_id", metavar="ID")
@json_option
@backend_options
def show_workflow(workflow_id: str, as_json: bool) -> None:
    """Show a workflow: its state, progress and every step with its state."""

    async def go(app: Conveyor) -> None:
        workflow = await fetch(app, workflow_id)
        if as_json:
            print_json(as_dict(workflow))
        else:
            print_workflow(workflow)

    run(go)


@workflows_group.command("cancel")
@click.argument("workflow_id", metavar="ID")
@backend_options
def cancel_workflow(workflow_id: str) -> None:
    """Cancel every step of a workflow that has not finished (running ones are signalled)."""

    async def go(app: Conveyor) -> None:
        workflow = await fetch(app, workflow_id)
        count = await workflow.cancel()
        if count == 0:
            raise CommandFailed(
                f"workflow {workflow.id} is already {workflow.state.value}; nothing to cancel"
            )
        click.echo(f"cancelled {count} job(s) of workflow {workflow.id}")

    run(go)

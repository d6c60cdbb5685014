"""The ``conveyor`` command: ``conveyor --help`` lists every command.

Errors are reported in one place, :class:`conveyor.cli.errors.ConveyorGroup`.
"""

from __future__ import annotations

from typing import NoReturn

import click

from conveyor import __version__
from conveyor.cli.bench import bench_command
from conveyor.cli.common import url_option
from conveyor.cli.demo import demo_command
from conveyor.cli.dlq import dlq_group
from conveyor.cli.enqueue import enqueue_command
from conveyor.cli.errors import ConveyorGroup
from conveyor.cli.jobs import jobs_group
from conveyor.cli.migrate import migrate_command
from conveyor.cli.queues import queues_group
from conveyor.cli.relay import relay_command
from conveyor.cli.scheduler import scheduler_command
from conveyor.cli.schedules import schedules_group
from conveyor.cli.serve import serve_command
from conveyor.cli.worker import worker_command
from conveyor.cli.workers import workers_command
from conveyor.cli.workflows import workflows_group


@click.group(cls=ConveyorGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="conveyor")
@url_option
def cli() -> None:
    """conveyor: durable background jobs.

    Start with `conveyor demo`. APP arguments are module:attribute of a
    Conveyor app, e.g. `conveyor worker myapp:app`.
    """


for command in (
    demo_command,
    worker_command,
    enqueue_command,
    jobs_group,
    workflows_group,
    dlq_group,
    queues_group,
    workers_command,
    scheduler_command,
    relay_command,
    schedules_group,
    serve_command,
    migrate_command,
    bench_command,
):
    cli.add_command(command)


def main() -> NoReturn:
    cli.main(prog_name="conveyor")
    raise AssertionError("unreachable: ConveyorGroup.main always exits")

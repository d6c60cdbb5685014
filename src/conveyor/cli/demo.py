"""``conveyor demo``: the first minute — sample tasks, a worker, a live view, a summary.

Everything runs in this process: the jobs go to a fresh SQLite file in the
current folder (``./conveyor-demo.db``), an in-process worker runs them, and
the display is fed by the app's events and ``app.stats()``.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from conveyor.app import Conveyor
from conveyor.cli.common import STATE_STYLES, console, state, url_option
from conveyor.cli.errors import INTERRUPTED, CommandFailed
from conveyor.durations import format_duration
from conveyor.job import Job, JobState

TIME_LIMIT = 60.0
"""A demo that has not finished by then is broken: stop and say so."""


@dataclass
class TaskTally:
    kind: str
    total: int
    completed: int = 0
    dead: int = 0
    retries: int = 0
    active: int = 0
    durations: list[float] = field(default_factory=list)
    progress: dict[str, float] = field(default_factory=dict)
    """Percent reported by each running job of this task."""

    @property
    def done(self) -> int:
        return self.completed + self.dead


class Tally:
    """What happened, from the app's events; states from ``app.stats()``."""

    def __init__(self, kinds: dict[str, tuple[str, int]]) -> None:
        self.tasks = {name: TaskTally(kind, total) for name, (kind, total) in kinds.items()}
        self.states: Counter[str] = Counter()
        self.total = sum(t.total for t in self.tasks.values())
        self.started = time.monotonic()

    def listen(self, app: Conveyor) -> None:
        for event in ("active", "completed", "failed", "retrying", "dead", "progress"):
            app.on(event, self.on_event)

    def on_event(self, event: str, job: Job, **data: Any) -> None:
        tally = self.tasks.get(job.task)
        if tally is None:
            return
        if event == "active":
            tally.active += 1
        elif event == "completed":
            tally.active -= 1
            tally.completed += 1
            tally.durations.append(float(data.get("duration", 0.0)))
            tally.progress.pop(job.id, None)
        elif event == "failed":
            tally.active -= 1
            tally.progress.pop(job.id, None)
        elif event == "retrying":
            tally.retries += 1
        elif event == "dead":
            tally.dead += 1
        elif event == "progress":
            percent = data.get("progress", {}).get("percent")
            if isinstance(percent, int | float):
                tally.progress[job.id] = float(percent)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def finished(self) -> int:
        return sum(self.states[s] for s in ("completed", "failed", "cancelled"))


async def demo_states(app: Conveyor, queues: tuple[str, ...]) -> Counter[str]:
    states: Counter[str] = Counter()
    for queue, counts in (await app.stats()).items():
        if queue in queues:
            states.update(counts)
    return states


# -- rendering -----------------------------------------------------------------------


def live_view(tally: Tally) -> RenderableType:
    table = Table(box=None, padding=(0, 1), show_edge=False)
    table.add_column("task")
    table.add_column("", width=24)
    table.add_column("done", justify="right")
    table.add_column("running", justify="right")
    table.add_column("retries", justify="right")
    table.add_column("dead", justify="right")
    table.add_column("", style="dim")
    for name, t in tally.tasks.items():
        partial = sum(t.progress.values()) / 100
        table.add_row(
            name,
            ProgressBar(total=t.total, completed=t.done + partial, width=24),
            f"{t.done}/{t.total}",
            str(max(t.active, 0)) if t.active else "",
            str(t.retries) if t.retries else "",
            f"[red]{t.dead}[/]" if t.dead else "",
            t.kind,
        )
    return Group(table, Text(""), states_line(tally))


def states_line(tally: Tally) -> Text:
    line = Text()
    for s in JobState:
        line.append(f"{s.value} ", style=STATE_STYLES[s.value])
        line.append(f"{tally.states[s.value]}  ", style="bold")
    rate = tally.finished / tally.elapsed if tally.elapsed > 0 else 0.0
    line.append(f"  {format_duration(tally.elapsed)} elapsed, {rate:.0f} jobs/s", style="dim")
    return line


def summary(tally: Tally, dead: list[Job], elapsed: float) -> RenderableType:
    per_task = Table(title="Summary", title_justify="left")
    per_task.add_column("task")
    per_task.add_column("jobs", justify="right")
    per_task.add_column("completed", justify="right", style="green")
    per_task.add_column("dead", justify="right", style="red")
    per_task.add_column("retries", justify="right")
    per_task.add_column("avg run", justify="right")
    for name, t in tally.tasks.items():
        average = sum(t.durations) / len(t.durations) if t.durations else None
        per_task.add_row(
            name,
            str(t.total),
            str(t.completed),
            str(t.dead),
            str(t.retries),
            format_duration(average) if average is not None else "-",
        )
    retries = sum(t.retries for t in tally.tasks.values())
    per_task.add_section()
    per_task.add_row(
        "all",
        str(tally.total),
        str(sum(t.completed for t in tally.tasks.values())),
        str(len(dead)),
        str(retries),
        "",
    )

    states = Table(title="Jobs by state", title_justify="left")
    for s in JobState:
        states.add_column(s.value, justify="right", style=STATE_STYLES[s.value])
    states.add_row(*(str(tally.states[s.value]) for s in JobState))

    letters = Table(title=f"Dead letters ({len(dead)})", title_justify="left")
    letters.add_column("id", no_wrap=True)
    letters.add_column("task")
    letters.add_column("tries", justify="right")
    letters.add_column("error", overflow="fold")
    for job in dead:
        error = f"{job.error.type}: {job.error.message}" if job.error else "-"
        letters.add_row(job.id, job.task, str(job.attempts), escape(error))

    finished = tally.finished
    totals = Text.assemble(
        ("total time ", "dim"),
        (format_duration(elapsed), "bold"),
        ("   throughput ", "dim"),
        (f"{finished / elapsed:.0f} jobs/s" if elapsed > 0 else "-", "bold"),
        ("   retries ", "dim"),
        (str(retries), "bold"),
        ("   dead letters ", "dim"),
        (str(len(dead)), "bold red" if dead else "bold"),
    )
    return Group(per_task, states, letters, totals)


def what_next(url: str) -> RenderableType:
    if url.startswith("memory:"):
        url = "sqlite:///./conveyor-demo.db"  # memory:// is gone: point at the default demo
        return Text.from_markup(
            "\n[bold]What next[/]\n  memory:// kept nothing; run [cyan]conveyor demo[/] "
            f"without --url to keep the jobs in {url} and inspect them"
        )
    return Text.from_markup(
        "\n[bold]What next[/]\n"
        f"  look at the dead letters   [cyan]conveyor dlq list --url {url}[/]\n"
        f"  retry one                  [cyan]conveyor dlq retry ID --url {url}[/]\n"
        f"  every job, with filters    [cyan]conveyor jobs list --state completed "
        f"--url {url}[/]\n"
        "  run a worker on your app   [cyan]conveyor worker myapp:app[/]"
        "   (myapp.py: app = Conveyor() + @app.task)\n"
        "  the tutorial               docs/tutorial/first-minute.md"
    )


# -- running -------------------------------------------------------------------------


def reset_database(url: str) -> None:
    """Delete the demo's SQLite file (and its WAL/journal) so each run starts fresh."""
    from conveyor.demo.tasks import DEMO_URL

    if url != DEMO_URL:
        return
    path = url.removeprefix("sqlite:///")
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


async def run_demo(app: Conveyor, out: Console, concurrency: int) -> tuple[Tally, list[Job], float]:
    from conveyor.demo.tasks import KINDS, QUEUES, plan

    tally = Tally(KINDS)
    tally.listen(app)
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    try:
        await app.connect()
        jobs = await app.enqueue_many(plan())
        out.print(
            f"enqueued {len(jobs)} jobs on queues {', '.join(QUEUES)}; "
            f"running a worker in this process (concurrency {concurrency})\n"
        )
        worker = app.worker(queues=QUEUES, concurrency=concurrency, install_signals=False)
        running = asyncio.create_task(worker.run())
        live = Live(live_view(tally), console=out, refresh_per_second=8, transient=True)
        interactive = out.is_terminal
        next_line = 0.0
        if interactive:
            live.start()
        try:
            while not (interrupted.is_set() or running.done()):
                tally.states = await demo_states(app, QUEUES)
                if interactive:
                    live.update(live_view(tally))
                elif tally.elapsed >= next_line:
                    out.print(states_line(tally))
                    next_line += 2.0
                if tally.finished >= tally.total or tally.elapsed > TIME_LIMIT:
                    break
                await asyncio.sleep(0.1)
        finally:
            if interactive:
                live.stop()
            worker.stop(force=interrupted.is_set())
            await running  # raises if a worker role crashed
        elapsed = tally.elapsed
        if interrupted.is_set():
            out.print("interrupted: the worker stopped; unfinished jobs stay in the database")
            raise click.exceptions.Exit(INTERRUPTED)
        if tally.finished < tally.total:
            raise CommandFailed(
                f"the demo did not finish within {TIME_LIMIT:.0f}s "
                f"({tally.finished}/{tally.total} jobs done)"
            )
        tally.states = await demo_states(app, QUEUES)
        dead = [job for q in QUEUES for job in await app.dlq.list(queue=q, limit=50)]
        return tally, dead, elapsed
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        await app.close()


@click.command("demo")
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(1),
    default=20,
    show_default=True,
    help="Jobs the demo's worker runs at once.",
)
@url_option
def demo_command(concurrency: int) -> None:
    """Run the showcase: ~260 sample jobs (fast, slow, sync, flaky, failing,
    delayed, with progress) through a worker, live, then a summary.

    Uses ./conveyor-demo.db (recreated on each run) unless --url says otherwise.
    """
    from conveyor.demo.tasks import DEMO_URL, create_app

    url = state().url or DEMO_URL
    reset_database(url)
    app = create_app(url)
    out = console()
    out.print(f"[bold]conveyor demo[/] on [cyan]{escape(url)}[/]")
    tally, dead, elapsed = asyncio.run(run_demo(app, out, concurrency))
    out.print(summary(tally, dead, elapsed))
    out.print(what_next(url))

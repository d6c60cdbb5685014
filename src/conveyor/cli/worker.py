"""``conveyor worker APP``: run a worker, or a supervisor of N worker processes."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import click

from conveyor import loops
from conveyor.app import Conveyor
from conveyor.cli.common import split_list, state, url_option
from conveyor.cli.errors import CommandFailed
from conveyor.cli.loading import load_app
from conveyor.durations import format_duration
from conveyor.errors import MissingDependency
from conveyor.job import ErrorInfo, Job
from conveyor.logs import LogFormat, set_worker_id, setup_logging
from conveyor.loops import LOOP_NAMES, resolve_loop
from conveyor.worker.memory import RECYCLE_EXIT
from conveyor.worker.worker import WorkerCrashed

if TYPE_CHECKING:
    from conveyor.task import TaskOptions
    from conveyor.worker.metrics import WorkerMetrics
    from conveyor.worker.supervisor import Supervisor

logger = logging.getLogger("conveyor.worker")
T = TypeVar("T")

#: ``conveyor.worker.executor`` names its thread-pool threads with this prefix.

LEVELS = click.Choice(["debug", "info", "warning", "error"], case_sensitive=False)


LOG_FORMATS = click.Choice(["text", "json"], case_sensitive=False)


def log_format_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--log-format text|json`` (docs/how-to/stack.md)."""
    return click.option(
        "--log-format",
        type=LOG_FORMATS,
        default="text",
        show_default=True,
        envvar="CONVEYOR_LOG_FORMAT",
        help="text: escaped lines (rich on a terminal); json: one JSON object per line.",
    )(command)


@click.command("worker")
@click.argument("app_spec", metavar="APP")
@click.option(
    "-q",
    "--queues",
    multiple=True,
    metavar="Q1,Q2",
    help="Queues to listen on (default: 'default' and every queue of the app's tasks).",
)
@click.option(
    "-c",
    "--concurrency",
    type=click.IntRange(1),
    help="Jobs run at once per process (default: the app's setting, 50).",
)
@click.option(
    "--prefetch",
    type=click.IntRange(0),
    help="Jobs claimed ahead of free slots (default: the app's setting, else adaptive).",
)
@click.option(
    "--processes",
    type=click.IntRange(1),
    help="Run this many worker processes under a supervisor that restarts them "
    "(1 too: one supervised process). Without it: one worker, no supervisor.",
)
@click.option("--burst", is_flag=True, help="Exit once nothing is due.")
@click.option(
    "--with-scheduler",
    is_flag=True,
    help="Also fire the app's schedules in this process (with --processes: in the supervisor).",
)
@click.option(
    "--loop",
    "loop_name",
    type=click.Choice(LOOP_NAMES),
    default="auto",
    show_default=True,
    envvar="CONVEYOR_LOOP",
    help="Event loop: auto = uvloop when installed (pip install 'conveyor[uvloop]'), else asyncio.",
)
@click.option("--log-level", type=LEVELS, default="info", show_default=True)
@log_format_option
@click.option(
    "--quiet",
    is_flag=True,
    help="No line per completed job (they log at DEBUG); retries, dead letters and problems stay.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve this process's Prometheus metrics on this port (with --processes: all children).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics port binds (0.0.0.0 for a scraper on another host).",
)
@click.option("--metrics-child", is_flag=True, hidden=True)
@click.option("--supervisor-pid", type=int, hidden=True)
@url_option
@click.pass_context
def worker_command(
    ctx: click.Context,
    app_spec: str,
    queues: tuple[str, ...],
    concurrency: int | None,
    prefetch: int | None,
    processes: int | None,
    burst: bool,
    with_scheduler: bool,
    loop_name: str,
    log_level: str,
    log_format: LogFormat,
    quiet: bool,
    metrics_port: int | None,
    metrics_host: str,
    metrics_child: bool,
    supervisor_pid: int | None,
) -> None:
    """Run a worker for APP (module:attribute of a Conveyor), until SIGTERM/SIGINT.

    The first signal stops claiming and lets running jobs finish within
    shutdown_timeout; a second one cancels them and gives them back.
    """
    url = state().url
    app = load_app(app_spec, url)
    app.backend  # noqa: B018  # builds (does not open) the backend: a bad URL fails here, once
    if loop_name == "uvloop" and importlib.util.find_spec("uvloop") is None:
        raise MissingDependency(  # a missing extra, as for the server or a backend: exit 3
            "--loop uvloop: uvloop is not installed (pip install 'conveyor[uvloop]'), "
            "or use --loop asyncio"
        )
    resolve_loop(loop_name)
    listen = split_list(queues)
    setup_logging(log_level, log_format)
    if processes is not None:
        command = [sys.executable, "-m", "conveyor", "worker", app_spec]
        if listen:
            command += ["--queues", ",".join(listen)]
        if concurrency:
            command += ["--concurrency", str(concurrency)]
        if prefetch is not None:
            command += ["--prefetch", str(prefetch)]
        if burst:
            command.append("--burst")
        if url:
            command += ["--url", url]
        command += ["--loop", loop_name, "--log-level", log_level, "--log-format", log_format]
        if quiet:
            command.append("--quiet")
        command += ["--supervisor-pid", str(os.getpid())]
        if metrics_port is not None:
            command.append("--metrics-child")
        ctx.exit(
            supervise(app, command, processes, burst, with_scheduler, metrics_port, metrics_host)
        )
    metrics = None
    if metrics_port is not None or metrics_child:
        from conveyor.worker.metrics import WorkerMetrics

        metrics = WorkerMetrics()
    recycled = loops.run(
        run_worker(
            app,
            listen,
            concurrency,
            burst,
            supervisor_pid,
            with_scheduler,
            prefetch,
            quiet,
            metrics=metrics,
            metrics_at=(metrics_host, metrics_port) if metrics_port is not None else None,
        ),
        loop_name,
    )
    if recycled:  # past max_worker_rss: a supervisor starts a fresh process
        ctx.exit(RECYCLE_EXIT)


def supervise(
    app: Conveyor,
    command: list[str],
    processes: int,
    burst: bool,
    with_scheduler: bool,
    metrics_port: int | None,
    metrics_host: str,
) -> int:
    """Run the supervisor; with a metrics port, serve the children's metrics summed."""
    from conveyor.worker.supervisor import Supervisor

    with contextlib.ExitStack() as stack:
        on_exit = None
        if metrics_port is not None:
            from conveyor.worker import metrics

            path = stack.enter_context(metrics.multiprocess_dir())
            server = metrics.serve(metrics_port, metrics.multiprocess_registry(path), metrics_host)
            stack.callback(server.shutdown)
            on_exit = metrics.child_exited
        supervisor = Supervisor(
            command,
            processes,
            shutdown_timeout=app.settings.shutdown_timeout,
            burst=burst,
            on_child_exit=on_exit,
        )
        if with_scheduler:  # one scheduler, in the process that outlives worker crashes
            return loops.run(supervise_with_scheduler(app, supervisor), "asyncio")
        # The supervisor only waits on its children: it keeps the standard loop,
        # whose subprocesses support process groups (uvloop's do not).
        return loops.run(supervisor.run(), "asyncio")


async def run_worker(
    app: Conveyor,
    queues: list[str],
    concurrency: int | None,
    burst: bool,
    supervisor_pid: int | None,
    with_scheduler: bool = False,
    prefetch: int | None = None,
    quiet: bool = False,
    metrics: WorkerMetrics | None = None,
    metrics_at: tuple[str, int] | None = None,
) -> bool:
    """Run one worker until it stops; True when it stopped past ``max_worker_rss``.
    With ``metrics_at`` (host, port), ``metrics`` are served there by this loop."""
    log_jobs(app, quiet)
    lag_probe = None
    server = None
    if metrics is not None:
        if metrics_at is not None:
            from conveyor.worker.metrics_http import serve_on_loop

            host, port = metrics_at
            try:
                server = await serve_on_loop(metrics.registry, host, port)
            except OSError as exc:
                raise CommandFailed(
                    f"--metrics-port {port}: cannot listen on {host}:{port}: {exc.strerror or exc}"
                ) from None
        metrics.attach(app.events)
        lag_probe = asyncio.create_task(metrics.watch_loop_lag())
    worker = app.worker(
        queues=queues or None, concurrency=concurrency, prefetch=prefetch, burst=burst
    )
    set_worker_id(worker.id)
    log_tasks(app)  # after the worker id is known: JSON lines name it from the first
    watchdog = None
    if supervisor_pid is not None:
        watchdog = asyncio.create_task(watch_supervisor(worker.stop, supervisor_pid))
    try:
        if with_scheduler:
            await beside_scheduler(app, worker.run())
        else:
            await worker.run()
    except WorkerCrashed as exc:  # already logged, with the role that died
        raise CommandFailed(f"{exc}: {exc.__cause__!r}") from None
    finally:
        if watchdog is not None:
            watchdog.cancel()
        if lag_probe is not None:
            lag_probe.cancel()
        if server is not None:
            server.close()
        await app.close()
    if burst:
        logger.info("burst done: %d job(s) processed", worker.processed)
    else:
        logger.info(
            "worker %s stopped: %d job(s) finished, %d released back to waiting",
            worker.id,
            worker.processed - worker.released,
            worker.released,
        )
    return worker.memory is not None and worker.memory.exceeded is not None


async def beside_scheduler(app: Conveyor, main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` (a worker or a supervisor) with the app's scheduler beside
    it; the scheduler stops when ``main`` returns or raises."""
    scheduler = app.scheduler()
    firing = asyncio.create_task(scheduler.run())
    try:
        return await main
    finally:
        scheduler.stop()
        await firing


async def supervise_with_scheduler(app: Conveyor, supervisor: Supervisor) -> int:
    try:
        return await beside_scheduler(app, supervisor.run())
    finally:
        await app.close()


def log_tasks(app: Conveyor) -> None:
    """The start banner: every task this worker can run, its queue, its caps and
    its rate limit."""
    tasks = sorted(app.tasks.values(), key=lambda task: task.name)
    logger.info("%d task(s):", len(tasks))
    width = max((len(task.name) for task in tasks), default=0)
    for task in tasks:
        cap = task.options.concurrency
        per_key = task.options.key_concurrency
        logger.info(
            "  %s  queue %s, concurrency %s%s%s",
            task.name.ljust(width),
            task.options.queue,
            cap if cap is not None else "unlimited",
            f", at most {per_key} per key cluster-wide" if per_key else "",
            _rate_note(task.options),
        )


def _rate_note(options: TaskOptions) -> str:
    """The banner's words for a task's rate limit (cluster-wide, maybe per key)."""
    rate = options.rate_limit
    if rate is None:
        return ""
    per = " per rate_limit_key" if options.rate_limit_key is not None else ""
    return f", rate limit {rate}{per} cluster-wide"


def log_jobs(app: Conveyor, quiet: bool = False) -> None:
    """One log line per completed job (INFO; DEBUG with ``quiet``), retry (WARNING)
    and dead letter (ERROR). Circuits are logged by the worker itself. A line
    whose level is off is not even listened for: the worker then skips building
    its event (a per-job cost at thousands of jobs per second)."""
    jobs = logging.getLogger("conveyor.jobs")
    level = logging.DEBUG if quiet else logging.INFO

    def completed(event: str, job: Job, duration: float = 0.0, **_: Any) -> None:
        jobs.log(
            level,
            "%s %s completed (attempt %d) in %s",
            job.task,
            job.id,
            job.attempts,
            format_duration(duration),
        )

    def failed(event: str, job: Job, error: ErrorInfo, will_retry: bool, **_: Any) -> None:
        if will_retry:
            jobs.warning(
                "%s %s failed (attempt %d of %d), will retry: %s: %s",
                job.task,
                job.id,
                job.attempts,
                job.max_attempts,
                error.type,
                error.message,
            )

    def dead(event: str, job: Job, reason: str, error: ErrorInfo | None = None, **_: Any) -> None:
        detail = f": {error.type}: {error.message}" if error is not None else ""
        jobs.error("%s %s dead-lettered (%s)%s", job.task, job.id, reason, detail)

    if jobs.isEnabledFor(level):
        app.on("completed", completed)
    if jobs.isEnabledFor(logging.WARNING):
        app.on("failed", failed)
    if jobs.isEnabledFor(logging.ERROR):
        app.on("dead", dead)


async def watch_supervisor(
    stop: Callable[[], None], supervisor_pid: int, every: float = 1.0
) -> None:
    """Stop the worker if its supervisor goes away (we were re-parented)."""
    while True:
        await asyncio.sleep(every)
        if os.getppid() != supervisor_pid:
            break
    logger.warning("supervisor (pid %d) is gone: stopping", supervisor_pid)
    stop()

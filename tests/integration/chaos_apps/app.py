"""The chaos app: tasks that sleep, die, leak memory, refuse to be cancelled or validate.

Every task records its runs in the side table (:mod:`.recorder`) and returns
``{"pid", "worker_id", "attempt"}`` so a job's final result names the process
whose outcome was stored.

Worker processes load ``tests.integration.chaos_apps.app:app`` (its URL comes
from ``CONVEYOR_URL``); the test process builds its own with :func:`make_app`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from conveyor.app import Conveyor
from conveyor.context import JobContext
from conveyor.task import Handler

from .recorder import RECORD_RENEWALS_ENV, RECORDER, RUNS_DIR_ENV, recorded

#: What ``chaos.hog`` leaks: kept for the life of the process.
HOARD: list[bytes] = []


def outcome(ctx: JobContext) -> dict[str, Any]:
    return {"pid": os.getpid(), "worker_id": ctx.worker_id, "attempt": ctx.job.attempts}


async def stubborn_sleep(seconds: float) -> bool:
    """Sleep ``seconds`` whatever happens; True when a cancellation was swallowed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    swallowed = False
    while (left := deadline - loop.time()) > 0:
        try:
            await asyncio.sleep(left)
        except asyncio.CancelledError:
            swallowed = True
            task = asyncio.current_task()
            assert task is not None
            task.uncancel()
    return swallowed


class Validated(Handler):
    """Refuses payloads whose ``n`` is not an int (the job fails ``invalid``)."""

    name = "chaos.validated"

    def validate(self, payload: Any) -> None:
        if not isinstance(payload, dict) or not isinstance(payload.get("n"), int):
            raise ValueError("payload needs an integer `n`")

    async def process(self, ctx: JobContext, payload: Any) -> Any:
        with recorded(ctx):
            return {**outcome(ctx), "n": payload["n"]}


def make_app(url: str | None = None) -> Conveyor:
    app = Conveyor(url)

    @app.task("chaos.sleep")
    async def sleep(ctx: JobContext, seconds: float = 0.0, **_: Any) -> dict[str, Any]:
        """Sleep (cancellably) for ``seconds``."""
        with recorded(ctx):
            await asyncio.sleep(seconds)
        return outcome(ctx)

    @app.task("chaos.sync_sleep")
    def sync_sleep(
        ctx: JobContext, seconds: float = 0.0, cooperative: bool = True
    ) -> dict[str, Any]:
        """A sync handler (the worker's thread pool). Its thread cannot be
        cancelled: ``cooperative`` polls ``ctx.cancelled``, otherwise it just sleeps."""
        job = ctx.job
        run_id = RECORDER.start(job.id, job.task, ctx.worker_id, job.attempts)
        if not cooperative:
            time.sleep(seconds)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not ctx.cancelled:
            time.sleep(0.01)
        RECORDER.end(run_id, "cancelled" if ctx.cancelled else "done")
        return outcome(ctx)

    @app.task("chaos.poison", attempts=3)
    async def poison(ctx: JobContext, how: str = "exit") -> None:
        """Kill the worker process that runs it: ``os._exit(1)``, SIGKILL, or
        ``sys.exit(2)`` (what argparse does on bad arguments)."""
        job = ctx.job
        RECORDER.start(job.id, job.task, ctx.worker_id, job.attempts)
        if how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if how == "sys-exit-2":
            sys.exit(2)
        os._exit(1)

    @app.task("chaos.fenced")
    async def fenced(
        ctx: JobContext, first: float = 5.0, later: float = 0.2, stubborn: bool = False
    ) -> dict[str, Any]:
        """Long on its first attempt, short afterwards. ``stubborn`` swallows
        cancellation and returns anyway, so the worker tries to complete it."""
        seconds = first if ctx.job.attempts == 1 else later
        job = ctx.job
        run_id = RECORDER.start(job.id, job.task, ctx.worker_id, job.attempts)
        if stubborn:
            swallowed = await stubborn_sleep(seconds)
            RECORDER.end(run_id, "done-after-cancel" if swallowed else "done")
        else:
            try:
                await asyncio.sleep(seconds)
            except asyncio.CancelledError:
                RECORDER.end(run_id, "cancelled")
                raise
            RECORDER.end(run_id, "done")
        return outcome(ctx)

    @app.task("chaos.effect")
    async def effect(ctx: JobContext, **_: Any) -> dict[str, Any]:
        """Does nothing but record its run: the effect a crash may repeat."""
        with recorded(ctx):
            return outcome(ctx)

    @app.task("chaos.block")
    async def block(ctx: JobContext, seconds: float = 2.0) -> dict[str, Any]:
        """On its first attempt, blocks the worker's event loop for ``seconds``
        (a sync sleep in an async handler: no renewal, no heartbeat meanwhile)."""
        with recorded(ctx):
            if ctx.job.attempts == 1:
                time.sleep(seconds)  # noqa: ASYNC251  # blocking the loop is the point
        return outcome(ctx)

    @app.task("chaos.hog")
    async def hog(ctx: JobContext, mb: int = 10, seconds: float = 0.0) -> dict[str, Any]:
        """Grow the process by ``mb`` MB it never frees (a leak), then sleep."""
        with recorded(ctx):
            HOARD.append(b"\x01" * (mb * 1024 * 1024))  # written: resident, not lazy
            await asyncio.sleep(seconds)
        return outcome(ctx)

    @app.task("chaos.keyed", key_concurrency=2, concurrency_key=lambda p: p["key"])
    async def keyed(ctx: JobContext, key: str, seconds: float = 0.02) -> dict[str, Any]:
        """At most 2 running per ``key`` across every worker (flow control)."""
        with recorded(ctx):
            await asyncio.sleep(seconds)
        return outcome(ctx)

    @app.task("chaos.rated", rate_limit="5/s", rate_limit_key=lambda p: p["key"])
    async def rated(ctx: JobContext, key: str) -> dict[str, Any]:
        """At most 5 starts per ``key`` per second across every worker; returns the
        claim's time (the store's clock, the one the windows count on)."""
        with recorded(ctx):
            return {**outcome(ctx), "key": key, "claimed_at": ctx.job.started_at}

    @app.task("chaos.debounced")
    async def debounced(ctx: JobContext, key: str, producer: int, n: int) -> dict[str, Any]:
        """Records the payload it ran with (a debounce storm keeps only the last)."""
        with recorded(ctx):
            return {**outcome(ctx), "key": key, "producer": producer, "n": n}

    @app.task("chaos.member")
    async def member(ctx: JobContext, n: int, seconds: float = 0.0) -> int:
        """A workflow step: sleep ``seconds``, return ``n``."""
        with recorded(ctx):
            await asyncio.sleep(seconds)
        return n

    @app.task("chaos.gather")
    async def gather(ctx: JobContext) -> int:
        """A chord's callback: writes the results it read to
        ``gathered-<job id>-<pid>-<run>.json`` (one file a run), returns their count."""
        with recorded(ctx) as run_id:
            results = await ctx.dependency_results()
            name = f"gathered-{ctx.job.id}-{os.getpid()}-{run_id}.json"
            (runs_dir() / name).write_text(json.dumps(results))
        return len(results)

    @app.task("chaos.total")
    async def total(ctx: JobContext) -> int:
        """Sums its dependencies' results (a diamond's join)."""
        with recorded(ctx):
            return sum(r for r in await ctx.dependency_results() if r is not None)

    @app.task("chaos.heals", attempts=1)
    async def heals(ctx: JobContext) -> int:
        """Fails until the file ``healed`` exists in the runs directory, then
        returns ten times its dependency's result."""
        with recorded(ctx):
            if not (runs_dir() / "healed").exists():
                raise RuntimeError("not healed yet")
            (before,) = await ctx.dependency_results()
            return int(before) * 10

    app.register(Validated())
    if os.environ.get(RECORD_RENEWALS_ENV) == "1":
        app.on("leases_renewed", record_renewal)
    return app


def record_renewal(event: str, seconds: float, error: BaseException | None, **_: Any) -> None:
    """Time each lease renewal round trip (the slow-link test's bound)."""
    RECORDER.renewal(seconds, error is not None)


def runs_dir() -> Path:
    return Path(os.environ[RUNS_DIR_ENV])


app = make_app()

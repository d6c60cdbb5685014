"""Job timeouts share one loop timer (worker/deadlines.py): each run is still
interrupted at its own deadline, and only then."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from conveyor.context import JobContext
from conveyor.job import Job
from conveyor.worker.deadlines import Deadlines
from conveyor.worker.running import Running, StopReason


class _Timed(Running):
    """Remembers the loop time of its interrupt."""

    __slots__ = ("interrupted_at",)

    def interrupt(self, reason: StopReason) -> None:
        self.interrupted_at = asyncio.get_running_loop().time()
        super().interrupt(reason)


def _run(name: str) -> _Timed:
    job = Job(id=name, task="t", queue="default")
    return _Timed(job, JobContext(job, "w", lambda job, report, encoded: None))


async def _until(condition: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def test_each_run_is_interrupted_at_its_own_deadline_earliest_first() -> None:
    deadlines = Deadlines()
    loop = asyncio.get_running_loop()
    start = loop.time()
    late, early = _run("late"), _run("early")
    deadlines.add(late, 0.3)
    deadlines.add(early, 0.1)  # earlier than the armed timer: re-armed for it
    await _until(lambda: early.stop_reason is not None)
    assert early.stop_reason == "timeout"
    assert early.interrupted_at >= start + 0.1
    assert late.stop_reason is None
    await _until(lambda: late.stop_reason is not None)
    assert late.stop_reason == "timeout"
    assert late.interrupted_at >= start + 0.3
    assert len(deadlines) == 0


async def test_a_run_discarded_before_its_deadline_is_never_interrupted() -> None:
    deadlines = Deadlines()
    done, running = _run("done"), _run("running")
    deadlines.add(done, 0.05)  # the armed timer fires for it, after it finished
    deadlines.add(running, 0.15)
    deadlines.discard(done)
    await _until(lambda: running.stop_reason is not None)
    assert done.stop_reason is None
    assert running.stop_reason == "timeout"


async def test_the_interrupt_cancels_the_handler_task() -> None:
    deadlines = Deadlines()
    run = _run("slow")
    run.task = asyncio.create_task(asyncio.sleep(10))
    deadlines.add(run, 0.05)
    with pytest.raises(asyncio.CancelledError):
        await run.task
    assert run.stop_reason == "timeout"


async def test_close_stops_the_timer() -> None:
    deadlines = Deadlines()
    run = _run("left")
    deadlines.add(run, 0.05)
    deadlines.close()
    await asyncio.sleep(0.15)
    assert run.stop_reason is None
    assert len(deadlines) == 0


def test_on_uvloop_a_run_is_not_interrupted_before_its_deadline() -> None:
    """libuv keeps millisecond time: the shared timer may fire a little early."""
    from conveyor import loops

    async def scenario() -> tuple[str, list[float]]:
        deadlines = Deadlines()
        loop = asyncio.get_running_loop()
        elapsed: list[float] = []
        for i in range(20):
            run = _run(f"r{i}")
            start = loop.time()
            deadlines.add(run, 0.0105)
            await _until(lambda: run.stop_reason is not None)  # noqa: B023  # awaited here
            elapsed.append(run.interrupted_at - start)
        return type(loop).__module__, elapsed

    module, elapsed = loops.run(scenario(), "uvloop")
    assert module.startswith("uvloop")
    assert min(elapsed) >= 0.0105 - 0.0011

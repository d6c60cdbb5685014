"""What resets a circuit's count of consecutive failures: a success, a reset, and
an operator acting on the dead letters (a retry or a purge) — not time alone."""

from __future__ import annotations

from worker_fixtures import Stack

from conveyor import Conveyor, JobState
from conveyor.backends.base import CircuitState
from conveyor.context import JobContext


async def failures_of(app: Conveyor, task: str) -> tuple[CircuitState, int] | None:
    circuits = {c.task: c for c in await app.circuits()}
    found = circuits.get(task)
    return None if found is None else (found.state, found.failures)


async def test_a_dead_letter_retry_starts_the_count_afresh(stack: Stack) -> None:
    app = stack.app(circuit_threshold=5, circuit_open_for="60s")

    @app.task("charge", attempts=1)
    async def charge(ctx: JobContext) -> None:
        raise RuntimeError("card declined")

    for _ in range(4):  # earlier runs: 4 failures counted
        await charge.enqueue()
    await app.drain()
    assert await failures_of(app, "charge") == (CircuitState.CLOSED, 4)

    dead = await app.dlq.list(task="charge")
    retried = await app.dlq.retry(dead[0].id)
    assert await failures_of(app, "charge") == (CircuitState.CLOSED, 0)
    await app.drain()  # the retry fails: 1, not 5, so still closed
    assert await failures_of(app, "charge") == (CircuitState.CLOSED, 1)
    assert (await app.wait_for_job(retried.id, timeout=5)).state is JobState.FAILED

    assert await app.dlq.purge(task="charge") == 5
    assert await failures_of(app, "charge") == (CircuitState.CLOSED, 0)


async def test_an_open_circuit_stays_open_after_a_retry(stack: Stack) -> None:
    app = stack.app(circuit_threshold=2, circuit_open_for="60s")

    @app.task("flaky", attempts=1)
    async def flaky(ctx: JobContext) -> None:
        raise RuntimeError("down")

    first, second = await flaky.enqueue(), await flaky.enqueue()
    await app.drain()
    assert await failures_of(app, "flaky") == (CircuitState.OPEN, 2)
    await app.dlq.retry(first.id)
    await app.dlq.purge(task="flaky", older_than="1h")  # purges nothing: no change
    assert await failures_of(app, "flaky") == (CircuitState.OPEN, 2)
    assert second.id != first.id

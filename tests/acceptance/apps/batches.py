"""A batch task for the end-to-end batch test: one poisoned job in each batch.

A plain ``def``: it runs in the thread pool. Each call appends its batch size
to the file named by ``BATCH_LOG``. Retries are due at once, so that a burst
worker runs them too."""

from __future__ import annotations

import os
from typing import Any

from conveyor.app import Conveyor
from conveyor.context import BatchContext
from conveyor.job import Job
from conveyor.retry import Backoff

app = Conveyor(poll_interval=0.1, heartbeat_interval=0.5, shutdown_timeout=5)


@app.task("embed", batch_size=100, attempts=2, backoff=Backoff.fixed(0), circuit_threshold=0)
def embed(ctx: BatchContext, jobs: list[Job]) -> list[Any]:
    with open(os.environ["BATCH_LOG"], "a") as log:
        log.write(f"{len(jobs)}\n")
    # The first job of every first-attempt batch is poisoned (it succeeds on its
    # retry); jobs whose number ends in 00 are poisoned on every attempt.
    first_try = all(job.attempts == 1 for job in jobs)
    outcomes: list[Any] = []
    for index, job in enumerate(jobs):
        number = job.payload["n"]
        if number % 100 == 0:
            outcomes.append(ValueError(f"poisoned {number}"))
        elif first_try and index == 0:
            outcomes.append(RuntimeError("first of the batch"))
        else:
            outcomes.append(number * 2)
    return outcomes

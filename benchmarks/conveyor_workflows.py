"""conveyor's side of benchmarks/workflows.py: the W1 drain and the same drain as
a group, a chord, a chain, each with a real worker process.

The worker is run.py's (``python -m conveyor worker benchmarks.apps.conveyor_app:app
-c 50``); every step is ``bench.noop``. Times are the ones the store stamped on
the jobs (``started_at`` at claim, ``finished_at`` at settle), on the same
machine clock as the producer's ``time.time()``.
"""

from __future__ import annotations

import time

from benchmarks.conveyor_side import ConveyorSide
from benchmarks.harness import running
from conveyor import Workflow, chain, chord, group
from conveyor.job import Job
from conveyor.workflow import Node

NOOP = "bench.noop"


class WorkflowSide(ConveyorSide):
    def steps(self, n: int) -> list[Node]:
        return [self.app.step(NOOP) for _ in range(n)]

    def start_group(self, n: int) -> float:
        """Start ``n`` no-op jobs as one group; returns the seconds it took."""
        t0 = time.perf_counter()
        self.run(self.app.start(group(*self.steps(n))))
        return time.perf_counter() - t0

    def group_drain(self, n: int) -> dict[str, float]:
        """W1's drain (the same figures) with the ``n`` jobs started as one group
        instead of ``enqueue_many``."""
        return self.drain(n, 1, self.start_group)

    def run_workflow(self, root: Node, total: int) -> tuple[float, list[Job]]:
        """Start ``root`` once a worker is up and has run a warm-up job; returns the
        time it was started and its jobs once all ``total`` have completed."""
        with running(self.start_worker()) as proc:
            self.wait_ready(proc)  # one warm-up job completed
            sent_at = time.time()
            workflow: Workflow = self.run(self.app.start(root))
            self.wait_done(total + 1, proc)
        self.run(workflow.refresh())
        return sent_at, workflow.jobs

    def chord(self, n: int) -> dict[str, float]:
        """A chord of ``n`` no-op members: the callback's start after the last
        member's settle, the members' drain, and the time from ``app.start`` to
        the callback's settle."""
        sent_at, jobs = self.run_workflow(chord(group(*self.steps(n)), self.app.step(NOOP)), n + 1)
        *members, callback = jobs
        last = max(job.finished_at or 0.0 for job in members)
        first = min(job.started_at or float("inf") for job in members)
        assert callback.started_at is not None
        assert callback.finished_at is not None
        return {
            "members": float(n),
            "callback_delay_ms": (callback.started_at - last) * 1000,
            "members_drain_per_s": n / (last - first),
            "end_to_end_s": callback.finished_at - sent_at,
        }

    def chain(self, steps: int) -> dict[str, float]:
        """``steps`` no-op steps one after another: steps per second from the
        first step's start to the last one's finish."""
        _, jobs = self.run_workflow(chain(*self.steps(steps)), steps)
        first, last = jobs[0], jobs[-1]
        assert first.started_at is not None
        assert last.finished_at is not None
        return {"steps": float(steps), "steps_per_s": steps / (last.finished_at - first.started_at)}

"""Workflows: steps composed with ``chain``, ``group`` and ``chord``, started in
one backend call, and the :class:`Workflow` handle to follow or cancel them.

A workflow compiles to jobs with dependencies (``depends_on``): a chain's step
depends on the step before it, a group's members on what came before the
group, a chord's callback on every member of its group. The backend releases a
job in the same operation that completes its last dependency, so nothing polls.
A step reads what it depends on with ``await ctx.dependency_results()``.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from conveyor.backends.base import JobFilter, NewJob
from conveyor.errors import InvalidWorkflow, JobCancelled, JobFailed
from conveyor.ids import new_id, new_ids
from conveyor.job import TERMINAL_STATES, Job, JobState

if TYPE_CHECKING:
    from conveyor.runtime import Runtime


@dataclass(frozen=True, slots=True)
class Step:
    """One job of a workflow, not enqueued yet: a task, its payload and the
    enqueue options of ``app.enqueue`` (``task.step(**payload)``,
    ``app.step(task, payload, **options)``)."""

    task: str
    payload: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Chain:
    """Run the parts one after another."""

    parts: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Group:
    """Run the parts side by side."""

    parts: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Chord:
    """Run ``group``, then ``callback`` once every part of it has completed."""

    group: Group
    callback: Node


Node = Step | Chain | Group | Chord


def chain(*parts: Node) -> Chain:
    """``chain(a, b, c)``: b starts when a completes, c when b completes."""
    return Chain(_parts("chain", parts))


def group(*parts: Node) -> Group:
    """``group(a, b, c)``: a, b and c run side by side."""
    return Group(_parts("group", parts))


def chord(header: Group | Sequence[Node], callback: Node) -> Chord:
    """``chord(group(a, b), c)``: c starts when a and b have both completed and
    reads their results, in order, with ``ctx.dependency_results()``."""
    members = header if isinstance(header, Group) else group(*header)
    if not isinstance(callback, Step | Chain | Group | Chord):
        raise TypeError(f"a chord's callback is a step or a workflow, not {callback!r}")
    return Chord(members, callback)


def _parts(kind: str, parts: Sequence[Node]) -> tuple[Node, ...]:
    if not parts:
        raise InvalidWorkflow(f"an empty {kind}")
    for part in parts:
        if not isinstance(part, Step | Chain | Group | Chord):
            raise TypeError(f"a {kind} takes steps and workflows, not {part!r}")
    return tuple(parts)


@dataclass(slots=True, eq=False)
class _Planned:
    step: Step
    after: list[_Planned]
    """The steps this one waits for."""
    id: str = ""


def plan(root: Node) -> tuple[list[_Planned], list[str]]:
    """The steps in an order where every dependency comes first (the order of
    their ids too), and the ids of the last steps: those nothing else waits for."""
    planned: list[_Planned] = []

    def add(node: Node, after: list[_Planned]) -> list[_Planned]:
        """Plan ``node`` after ``after``; returns the steps that finish it."""
        if isinstance(node, Step):
            planned.append(_Planned(node, after))
            return [planned[-1]]
        if isinstance(node, Chain):
            for part in node.parts:
                after = add(part, after)
            return after
        if isinstance(node, Group):
            return [tail for part in node.parts for tail in add(part, after)]
        return add(node.callback, add(node.group, after))

    tails = add(root, [])
    for step, job_id in zip(planned, new_ids(len(planned)), strict=True):
        step.id = job_id
    return planned, [tail.id for tail in tails]


async def start(runtime: Runtime, root: Node) -> Workflow:
    """Store every job of ``root`` in one backend call (all or nothing)."""
    if not isinstance(root, Step | Chain | Group | Chord):
        raise TypeError(f"start takes a step or a workflow (chain, group, chord), not {root!r}")
    planned, tails = plan(root)
    known = runtime.tasks
    unknown = sorted({p.step.task for p in planned if known and p.step.task not in known})
    if unknown:
        raise InvalidWorkflow(f"unknown task(s): {', '.join(unknown)}")
    workflow_id = new_id()
    build = runtime.builder.build
    new_jobs: list[NewJob] = []
    for item in planned:
        new = build(item.step.task, item.step.payload, item.step.options, item.id)
        new.depends_on = [*(before.id for before in item.after), *new.depends_on]
        new.workflow_id = workflow_id
        new_jobs.append(new)
    jobs = await runtime.store_new(new_jobs)
    runtime.local_workers.wake()
    return Workflow(runtime, workflow_id, jobs, tails)


class WorkflowState(enum.StrEnum):
    RUNNING = "running"  # some job is not finished
    COMPLETED = "completed"  # every job completed
    FAILED = "failed"  # every job finished, some failed
    CANCELLED = "cancelled"  # every job finished, none failed, some cancelled


class Workflow:
    """A started workflow: ``id``, ``jobs`` (as last read), ``state``,
    ``await wait(timeout)``, ``await cancel()``, ``await refresh()``."""

    def __init__(
        self,
        runtime: Runtime,
        workflow_id: str,
        jobs: list[Job],
        tails: list[str],
        retried: dict[str, str] | None = None,
    ):
        self.id = workflow_id
        self.jobs = jobs
        self._runtime = runtime
        self._tails = tails
        #: A failed step -> its dead-letter retry (which stands in for it).
        self.retried: dict[str, str] = retried or {}

    @classmethod
    async def load(cls, runtime: Runtime, workflow_id: str) -> Workflow | None:
        backend = await runtime.connect()
        jobs = await backend.list_jobs(JobFilter(workflow_id=workflow_id), limit=1_000_000)
        if not jobs:
            return None
        # A failed step retried from the dead-letter queue: its copy stands in
        # for it (and its dependents wait on the copy), unless the copy is gone.
        present = {job.id for job in jobs}
        retried = {job.id: job.retried_as for job in jobs if job.retried_as in present}
        jobs = [job for job in jobs if job.id not in retried]
        jobs.sort(key=lambda job: job.id)  # ids increase with creation: the start order
        waited_on = {dep for job in jobs for dep in job.depends_on}
        tails = [job.id for job in jobs if job.id not in waited_on]
        return cls(runtime, workflow_id, runtime.bind_all(jobs), tails, retried)

    def on(self, runtime: Runtime) -> Workflow:
        """This workflow read through ``runtime`` (``start_sync`` started it on a twin)."""
        return Workflow(runtime, self.id, runtime.bind_all(self.jobs), self._tails)

    @property
    def state(self) -> WorkflowState:
        states = {job.state for job in self.jobs}
        if not states <= TERMINAL_STATES:
            return WorkflowState.RUNNING
        if JobState.FAILED in states:
            return WorkflowState.FAILED
        if JobState.CANCELLED in states:
            return WorkflowState.CANCELLED
        return WorkflowState.COMPLETED

    async def refresh(self) -> Workflow:
        fresh = await Workflow.load(self._runtime, self.id)
        if fresh is not None:
            self.jobs = fresh.jobs
            self._tails = [_latest(tail, fresh.retried) for tail in self._tails]
        return self

    async def wait(self, timeout: float | None = None, poll: float = 0.05) -> Any:
        """Wait until every job has finished. Returns the result of the last step
        (a list of results, in order, when the workflow ends in several); raises
        ``JobFailed`` / ``JobCancelled`` for the first job that did not complete,
        ``TimeoutError`` when ``timeout`` passes first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = min(poll, 0.01)
        while (await self.refresh()).state is WorkflowState.RUNNING:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"workflow {self.id} is still running after {timeout}s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, poll)
        for job in self.jobs:
            if job.state is JobState.FAILED:
                raise JobFailed(job)
        for job in self.jobs:
            if job.state is JobState.CANCELLED:
                raise JobCancelled(job)
        by_id = {job.id: job for job in self.jobs}
        results = [by_id[tail].result for tail in self._tails if tail in by_id]
        return results[0] if len(results) == 1 else results

    async def cancel(self) -> int:
        """Cancel every job of the workflow that has not finished (running ones
        are signalled and end ``cancelled``); returns how many. The last steps go
        first, so that each ends as plainly cancelled, not ``dependency_failed``."""
        backend = await self._runtime.connect()
        await self.refresh()
        count = 0
        for job in reversed(self.jobs):
            if job.state in TERMINAL_STATES:
                continue
            changed = await backend.cancel_job(job.id)
            if changed is None or changed.state not in (JobState.CANCELLED, JobState.ACTIVE):
                continue
            if changed.state is JobState.ACTIVE:
                self._runtime.local_workers.request_cancel(job.id)
            count += 1
        await self.refresh()
        return count

    def __repr__(self) -> str:
        return f"<Workflow {self.id} {self.state.value}, {len(self.jobs)} jobs>"


def _latest(job_id: str, retried: dict[str, str]) -> str:
    """The job that stands for ``job_id`` after dead-letter retries (a copy can
    fail and be retried in turn)."""
    while job_id in retried:
        job_id = retried[job_id]
    return job_id

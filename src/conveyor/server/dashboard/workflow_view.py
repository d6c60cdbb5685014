"""The workflow page's data: every step with its state, its layer (how many
steps deep it waits), and the positions of a layered graph drawn as inline SVG."""

from __future__ import annotations

from dataclasses import dataclass

from conveyor.app import Conveyor
from conveyor.job import TERMINAL_STATES, Job, JobState
from conveyor.workflow import Workflow

#: Above this many steps the graph is left out (the table still lists them all):
#: a browser draws a few hundred boxes in an instant, not ten thousand.
GRAPH_LIMIT = 300
NODE_W, NODE_H = 168, 40
GAP_X, GAP_Y = 56, 14
PAD = 8


@dataclass(slots=True)
class StepRow:
    number: int
    job: Job
    layer: int
    after: list[int]
    """Row numbers of the steps it waits for."""
    x: int = 0
    y: int = 0


@dataclass(slots=True)
class Edge:
    x1: int
    y1: int
    x2: int
    y2: int
    state: str
    """The state of the step the edge comes from: a failed one is drawn red."""


@dataclass(slots=True)
class WorkflowPage:
    now: float
    workflow: Workflow
    steps: list[StepRow]
    layers: int
    finished: int
    edges: list[Edge]
    width: int
    height: int

    @property
    def total(self) -> int:
        return len(self.steps)

    @property
    def failures(self) -> list[StepRow]:
        return [row for row in self.steps if row.job.state is JobState.FAILED]

    @property
    def graph(self) -> bool:
        return 0 < self.total <= GRAPH_LIMIT

    @property
    def graph_limit(self) -> int:
        return GRAPH_LIMIT


def layered(jobs: list[Job]) -> list[StepRow]:
    """Each job's layer: 0 without a dependency inside the workflow, else one
    more than its deepest dependency. Jobs come in start order, dependencies
    first, so one pass suffices."""
    number = {job.id: i for i, job in enumerate(jobs, 1)}
    layer_of: dict[str, int] = {}
    rows = []
    for job in jobs:
        inside = [dep for dep in job.depends_on if dep in number]
        layer = 1 + max((layer_of.get(dep, 0) for dep in inside), default=-1)
        layer_of[job.id] = layer
        rows.append(StepRow(number[job.id], job, layer, [number[dep] for dep in inside]))
    return rows


def place(rows: list[StepRow]) -> tuple[list[Edge], int, int]:
    """Columns by layer, rows in start order; the edges between the boxes."""
    filled: dict[int, int] = {}
    by_number = {row.number: row for row in rows}
    for row in rows:
        slot = filled.get(row.layer, 0)
        filled[row.layer] = slot + 1
        row.x = PAD + row.layer * (NODE_W + GAP_X)
        row.y = PAD + slot * (NODE_H + GAP_Y)
    edges = []
    for row in rows:
        for before in row.after:
            source = by_number[before]
            edges.append(
                Edge(
                    source.x + NODE_W,
                    source.y + NODE_H // 2,
                    row.x,
                    row.y + NODE_H // 2,
                    source.job.state.value,
                )
            )
    layers = max(filled, default=-1) + 1
    width = 2 * PAD + layers * NODE_W + max(0, layers - 1) * GAP_X
    height = 2 * PAD + max(filled.values(), default=0) * (NODE_H + GAP_Y) - GAP_Y
    return edges, width, max(height, 0)


async def workflow_page(app: Conveyor, workflow_id: str) -> WorkflowPage | None:
    workflow = await app.get_workflow(workflow_id)
    if workflow is None:
        return None
    backend = await app.connect()
    rows = layered(workflow.jobs)
    edges, width, height = place(rows) if len(rows) <= GRAPH_LIMIT else ([], 0, 0)
    return WorkflowPage(
        now=await backend.now(),
        workflow=workflow,
        steps=rows,
        layers=1 + max((row.layer for row in rows), default=-1),
        finished=sum(job.state in TERMINAL_STATES for job in workflow.jobs),
        edges=edges,
        width=width,
        height=height,
    )

"""Request bodies and query strings, validated by pydantic: a wrong type or an
unknown field is a 422 naming the field. Their JSON schemas feed the OpenAPI
document (server/openapi/schemas.py)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter

from conveyor.job import FailureReason, JobState
from conveyor.producer import PRIORITY_MAX, PRIORITY_MIN

#: Names of tasks, queues, tenants, keys: printable, bounded.
Name = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]+$")]
#: Seconds, or a duration string such as "250ms", "30s", "5m".
DurationValue = Annotated[
    float | Annotated[str, Field(max_length=32)],
    Field(description='Seconds, or a duration such as "250ms", "30s", "5m", "1h".'),
]
SMALL_INT = 2**31 - 1


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Query(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EnqueueBody(Body):
    """``POST /api/v1/jobs``: the task, its JSON payload and ``app.enqueue`` options."""

    task: Name
    payload: Any = None
    delay: DurationValue | None = None
    run_at: float | AwareDatetime | None = Field(
        None, description="POSIX seconds or an ISO 8601 time with a zone."
    )
    priority: int | None = Field(None, ge=PRIORITY_MIN, le=PRIORITY_MAX)  # what enqueue takes
    attempts: int | None = Field(None, ge=1, le=SMALL_INT)
    timeout: DurationValue | None = None
    idempotency_key: Name | None = None
    tenant: Name | None = None
    metadata: dict[str, Any] | None = None
    queue: Name | None = None
    ttl: DurationValue | None = None
    worker: Name | None = None
    idempotency_ttl: DurationValue | None = None
    concurrency_key: Name | None = None
    rate_limit_key: Name | None = Field(
        None, description="The window the task's per-key rate limit counts this job's start in."
    )
    debounce: DurationValue | None = Field(
        None, description="With idempotency_key: replace the key's unstarted job and postpone it."
    )


#: How deep a workflow sent as JSON may nest (chains of groups of chains...).
MAX_WORKFLOW_DEPTH = 32
#: How many parts one chain or group of a JSON workflow may have.
MAX_WORKFLOW_PARTS = 10_000


def _node_kind(value: Any) -> str:
    """Which shape a workflow node is: named by its one key, else a step."""
    if isinstance(value, dict):
        for kind in ("chain", "group", "chord"):
            if kind in value:
                return kind
    elif isinstance(value, ChainBody | GroupBody | ChordBody):
        return type(value).__name__.removesuffix("Body").lower()
    return "step"


class ChainBody(Body):
    """``{"chain": [node, ...]}``: each part starts when the one before completes."""

    chain: list[WorkflowNode] = Field(min_length=1, max_length=MAX_WORKFLOW_PARTS)


class GroupBody(Body):
    """``{"group": [node, ...]}``: the parts run side by side."""

    group: list[WorkflowNode] = Field(min_length=1, max_length=MAX_WORKFLOW_PARTS)


class ChordParts(Body):
    group: list[WorkflowNode] = Field(min_length=1, max_length=MAX_WORKFLOW_PARTS)
    callback: WorkflowNode


class ChordBody(Body):
    """``{"chord": {"group": [node, ...], "callback": node}}``."""

    chord: ChordParts


#: ``POST /api/v1/workflows``: a step (an ``EnqueueBody``) or a chain, group or chord.
WorkflowNode = Annotated[
    Annotated[EnqueueBody, Tag("step")]
    | Annotated[ChainBody, Tag("chain")]
    | Annotated[GroupBody, Tag("group")]
    | Annotated[ChordBody, Tag("chord")],
    Discriminator(_node_kind),
]
for _model in (ChainBody, GroupBody, ChordParts, ChordBody):
    _model.model_rebuild()
WORKFLOW_BODY: TypeAdapter[WorkflowNode] = TypeAdapter(WorkflowNode)


class JobListQuery(Query):
    state: JobState | None = None
    queue: Name | None = None
    task: Name | None = None
    tenant: Name | None = None
    reason: FailureReason | None = None
    limit: int = Field(100, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=SMALL_INT)


class DeadLetterQuery(Query):
    queue: Name | None = None
    task: Name | None = None
    tenant: Name | None = None
    reason: FailureReason | None = None
    limit: int = Field(100, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=SMALL_INT)


class PurgeBody(Body):
    """Delete the dead letters matching every given filter. An empty filter
    must say ``"all": true``, so a forgotten field never empties the queue."""

    task: Name | None = None
    queue: Name | None = None
    tenant: Name | None = None
    reason: FailureReason | None = None
    older_than: DurationValue | None = None
    all: bool = False


class CronBody(Body):
    """Exactly one of ``cron`` (5 or 6 fields) and ``every`` (an interval)."""

    cron: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    every: DurationValue | None = None


class NextFiresQuery(Query):
    next: int = Field(5, ge=0, le=100)

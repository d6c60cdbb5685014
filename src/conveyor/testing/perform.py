"""``perform_job``: run a task's handler once, in this process, as a worker would."""

from __future__ import annotations

import asyncio
import inspect
from typing import TYPE_CHECKING, Any

from conveyor import serialization
from conveyor.context import JobContext
from conveyor.ids import new_id
from conveyor.job import Job, JobState
from conveyor.task import FunctionHandler

if TYPE_CHECKING:
    from conveyor.app import Conveyor

#: The ``worker_id`` a handler sees under :func:`perform_job`.
WORKER_ID = "perform_job"


async def perform_job(app: Conveyor, task: str, payload: Any = None, **job_fields: Any) -> Any:
    """Run the handler of ``task`` once on ``payload`` and return its result.

    Like a worker: the payload makes the JSON round trip a stored job makes, the
    task's ``validate`` runs first (its error is raised as is), the handler gets a
    real :class:`~conveyor.context.JobContext` on an ``active`` job, a plain
    ``def`` handler runs in a thread, and a result that cannot be stored as
    JSON raises. Unlike a worker: nothing is stored or enqueued, the handler's
    own exception is raised (no retry, no dead letter), no timeout is applied,
    and the lifecycle hooks (``on_start``, ``on_complete``, ``on_failed``) are
    not called. ``job_fields`` set fields of the job the handler sees
    (``attempts=3``, ``tenant="acme"``, ``metadata={...}``).
    """
    found = app.get_task(task)  # UnknownTask for a name the app does not know
    handler = found.handler
    data = serialization.loads(serialization.dumps({} if payload is None else payload))
    fields: dict[str, Any] = {
        "queue": found.options.queue,
        "priority": found.options.priority,
        "attempts": 1,
        "max_attempts": found.options.attempts or app.settings.default_attempts,
        **job_fields,
    }
    job = Job(id=fields.pop("id", None) or new_id(), task=task, payload=data, **fields)
    job.state = JobState.ACTIVE
    job.worker_id = WORKER_ID
    handler.validate(job.payload)
    ctx = JobContext(job, WORKER_ID)
    if isinstance(handler, FunctionHandler):
        call, is_async = handler.call, handler.is_async
    else:
        call, is_async = handler.process, inspect.iscoroutinefunction(handler.process)
    if is_async:
        result = await call(ctx, job.payload)
    else:
        # A worker runs sync handlers in its thread pool; here too, so a handler
        # that calls app.enqueue_sync() behaves as it will in production.
        result = await asyncio.to_thread(call, ctx, job.payload)
    if result is not None:
        serialization.dumps(result)  # a worker could not store it: fail here too
    return result

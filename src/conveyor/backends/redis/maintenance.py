"""Housekeeping the cleaner runs: stalled-job recovery (``recover-3.lua``) and
retention (``prune-1.lua`` for plain jobs; whole workflows by
``workflow-rows-1.lua``, ``threshold-1.lua`` and ``delete-workflows-1.lua``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from conveyor.backends import base
from conveyor.backends.redis import decode
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.encode import float_text, opt
from conveyor.backends.workflow_retention import (
    WORKFLOW_CHUNK,
    Threshold,
    WorkflowRow,
    due_workflows,
    threshold_of,
)
from conveyor.job import JobState

#: At most this many jobs deleted per retention rule in one call (keeps each
#: script short; the cleaner runs again soon).
PRUNE_CAP = 20_000


async def recover_stalled(conn: RedisConnection, max_stalled: int) -> base.StallResult:
    k = conn.keys
    requeued, failed, cancelled = await conn.run(
        "recover", [k.active, k.expiring, k.wake], [max_stalled]
    )
    return base.StallResult(
        decode.jobs_from_hashes(requeued),
        decode.jobs_from_hashes(failed),
        decode.jobs_from_hashes(cancelled),
    )


async def prune_jobs(
    conn: RedisConnection, rules: Sequence[base.PruneRule], clock: Callable[[], Awaitable[float]]
) -> int:
    """Plain jobs by ``prune-1.lua``, then whole workflows; ``clock`` is the server's."""
    argv: list[Any] = [PRUNE_CAP, len(rules)]
    for rule in rules:
        argv += (
            rule.state.value,
            float_text(rule.max_age),
            opt(rule.max_count),
            opt(rule.task),
            len(rule.exclude_tasks),
            *rule.exclude_tasks,
        )
    plain, workflows_due = await conn.run("prune", [conn.keys.all], argv)
    deleted = int(plain)
    if int(workflows_due):  # else no workflow can be due: skip reading every job
        deleted += await prune_workflows(conn, rules, await clock())
    return deleted


#: Job ids read per call while looking for the jobs of workflows.
SCAN_PAGE = 5_000


async def prune_workflows(
    conn: RedisConnection, rules: Sequence[base.PruneRule], now: float
) -> int:
    """Delete each workflow whose jobs are all terminal and due, all together.
    The rows are read in pages (not atomically): the delete script checks
    again, for each workflow, that what was read still holds."""
    thresholds: list[Threshold | None] = []
    for rule in rules:
        newest_kept = None
        if rule.max_count is not None and rule.max_count > 0:
            found = await conn.run(
                "threshold",
                [conn.keys.all],
                [
                    rule.state.value,
                    rule.max_count,
                    opt(rule.task),
                    len(rule.exclude_tasks),
                    *rule.exclude_tasks,
                ],
            )
            newest_kept = (float(found[0]), _text(found[1])) if found else None
        thresholds.append(threshold_of(rule, newest_kept))
    rows: list[WorkflowRow] = []
    cursor = ""
    while True:
        page = await conn.run("workflow-rows", [conn.keys.all], [cursor, SCAN_PAGE])
        cursor = _text(page[0])
        for i in range(1, len(page), 5):
            workflow_id, job_id, state, task, finished = (_text(v) for v in page[i : i + 5])
            rows.append(
                WorkflowRow(
                    workflow_id,
                    job_id,
                    JobState(state),
                    task,
                    float(finished) if finished else None,
                )
            )
        if not cursor:
            break
    due = sorted(due_workflows(rows, rules, now, thresholds))
    members: dict[str, list[str]] = {workflow_id: [] for workflow_id in due}
    for row in rows:
        if row.workflow_id in members:
            members[row.workflow_id].append(row.id)
    deleted = 0
    for i in range(0, len(due), WORKFLOW_CHUNK):
        argv: list[Any] = [len(due[i : i + WORKFLOW_CHUNK])]
        for workflow_id in due[i : i + WORKFLOW_CHUNK]:
            argv += [len(members[workflow_id]), *members[workflow_id]]
        deleted += int(await conn.run("delete-workflows", [conn.keys.all], argv))
    return deleted


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value

"""Maintenance: stalled-job recovery (one statement, then one NOTIFY for the
queues that got jobs back) and retention, in chunks of CHUNK rows."""

from __future__ import annotations

from collections.abc import Sequence

from conveyor.backends.base import PruneRule, StallResult
from conveyor.backends.postgres.admin import CHUNK
from conveyor.backends.postgres.connection import Pool
from conveyor.backends.postgres.decode import job_from_row
from conveyor.backends.postgres.queries import Queries
from conveyor.backends.workflow_retention import (
    WORKFLOW_CHUNK,
    Threshold,
    WorkflowRow,
    due_workflows,
    threshold_of,
)
from conveyor.job import TERMINAL_STATES, JobState


async def recover_stalled(pool: Pool, q: Queries, max_stalled: int) -> StallResult:
    result = StallResult()
    for row in await pool.fetch("recover stalled", q.recover_stalled, max_stalled):
        job = job_from_row(row)  # listed by the state it ended in
        if job.state is JobState.WAITING:
            result.requeued.append(job)
        elif job.state is JobState.CANCELLED:
            result.cancelled.append(job)
        else:
            result.failed.append(job)
    if result.requeued:
        queues = sorted({job.queue for job in result.requeued})
        await pool.execute("notify", q.notify, queues)
    return result


async def prune_jobs(pool: Pool, q: Queries, rules: Sequence[PruneRule]) -> int:
    total = 0
    for rule in rules:
        if rule.state not in TERMINAL_STATES:
            continue  # retention never touches live jobs
        exclude = list(rule.exclude_tasks)
        for query, bound in (
            (q.prune_by_age, rule.max_age),
            (q.prune_by_count, rule.max_count),
        ):
            if bound is None:
                continue
            limit: float | int = max(0, bound) if query is q.prune_by_count else bound
            while True:  # chunked, until the rule has nothing left to delete
                deleted = int(
                    await pool.fetchval(
                        "prune", query, rule.state.value, limit, rule.task, exclude, CHUNK
                    )
                )
                total += deleted
                if not deleted:
                    break
    if any(rule.max_age is not None or rule.max_count is not None for rule in rules):
        rows = await pool.fetch("prune", q.finished_workflows)
        workflow_ids = [row[0] for row in rows]
        for i in range(0, len(workflow_ids), WORKFLOW_CHUNK):
            total += await prune_workflows(pool, q, rules, workflow_ids[i : i + WORKFLOW_CHUNK])
    await pool.execute("prune keys", q.prune_keys)
    await pool.execute("prune rate starts", q.prune_rate_starts)
    await pool.execute("prune fair passes", q.prune_fair_passes)
    await pool.execute("prune rate key starts", q.prune_rate_key_starts)
    return total


async def prune_workflows(
    pool: Pool, q: Queries, rules: Sequence[PruneRule], workflow_ids: list[str]
) -> int:
    """Delete, all together, the jobs of each of ``workflow_ids`` that is (still)
    finished and due, in one transaction with its rows locked."""
    async with pool.acquire("prune") as conn, conn.transaction():
        now = float(await conn.fetchval(q.now))
        thresholds: list[Threshold | None] = []
        for rule in rules:
            newest_kept = None
            if rule.max_count is not None and rule.max_count > 0:
                found = await conn.fetchrow(
                    q.count_threshold,
                    rule.state.value,
                    rule.max_count,
                    rule.task,
                    list(rule.exclude_tasks),
                )
                newest_kept = (found[0], found[1]) if found is not None else None
            thresholds.append(threshold_of(rule, newest_kept))
        rows = (
            WorkflowRow(wf, job_id, JobState(state), task, finished)
            for wf, job_id, state, task, finished in await conn.fetch(q.workflow_rows, workflow_ids)
        )
        due = due_workflows(rows, rules, now, thresholds)
        if not due:
            return 0
        return int(await conn.fetchval(q.delete_workflows, sorted(due)))

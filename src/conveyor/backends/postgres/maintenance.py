"""Maintenance: stalled-job recovery (one statement, then one NOTIFY for the
queues that got jobs back) and retention, in chunks of CHUNK rows."""

from __future__ import annotations

from collections.abc import Sequence

from conveyor.backends.base import PruneRule, StallResult
from conveyor.backends.postgres.admin import CHUNK
from conveyor.backends.postgres.connection import Pool
from conveyor.backends.postgres.decode import job_from_row
from conveyor.backends.postgres.queries import Queries
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
    await pool.execute("prune keys", q.prune_keys)
    await pool.execute("prune rate starts", q.prune_rate_starts)
    return total

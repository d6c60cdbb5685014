"""Housekeeping the cleaner runs: stalled-job recovery (``recover-3.lua``) and
retention (``prune-1.lua``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor.backends import base
from conveyor.backends.redis import decode
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.encode import float_text, opt

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


async def prune_jobs(conn: RedisConnection, rules: Sequence[base.PruneRule]) -> int:
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
    return int(await conn.run("prune", [conn.keys.all], argv))

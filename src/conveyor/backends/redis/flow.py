"""Flow-control reads on Redis: jobs per concurrency key (``key_counts``) and
starts per rate window (``rate_key_usage``), for the surfaces.

Both read a slice at a time (pipelined, never one long script), so a large
backlog never holds Redis for long; they are not one snapshot.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from conveyor.backends.base import KeyCount, RateKeyUse
from conveyor.backends.records import rank_key_counts, rank_rate_key_uses
from conveyor.backends.redis.connection import RedisConnection
from conveyor.ratelimit import RateLimit

#: Members read per round trip (of the active index, a waiting set or a window index).
SLICE = 1000
Group = tuple[str, str | None]


def _text(value: bytes | None) -> str | None:
    return value.decode() if value is not None else None


async def key_counts(conn: RedisConnection, tasks: Sequence[str], limit: int) -> list[KeyCount]:
    """Active jobs from the app-wide ``active`` index (one ``HMGET`` of task and
    key per active job: bounded by the workers' concurrency); waiting jobs of
    ``tasks`` from their waiting sets (``keyslice-1.lua``: one ``HMGET`` per job
    inside Redis, a slice of the set per call)."""
    asked = set(tasks)
    active: Counter[Group] = Counter()
    waiting: Counter[Group] = Counter()
    client, _ = conn.ready()
    async with conn.errors("key_counts"):
        start = 0
        while ids := await client.zrange(conn.keys.active, start, start + SLICE - 1):
            pipe = client.pipeline(transaction=False)
            for job_id in ids:
                pipe.hmget(conn.keys.job(job_id.decode()), "t", "ck", "s")
            for task, key, state in await pipe.execute():
                if task is None or state != b"active":
                    continue  # settled or deleted since the slice was read
                group = (task.decode(), _text(key))
                if group[0] in asked or group[1] is not None:
                    active[group] += 1
            start += SLICE
    if asked:
        flat = await conn.run("waitsets", [conn.keys.queues], sorted(asked))
        for i in range(0, len(flat), 2):
            await _count_waiting(conn, flat[i].decode(), flat[i + 1].decode(), waiting)
    counts = (
        KeyCount(task, key, active[(task, key)], waiting[(task, key)] if task in asked else None)
        for task, key in active.keys() | waiting.keys()
    )
    return rank_key_counts(counts, limit)


async def _count_waiting(
    conn: RedisConnection, waiting_set: str, task: str, into: Counter[Group]
) -> None:
    """Count one waiting set's jobs per key, ``keyslice-1.lua`` a slice at a time."""
    start = 0
    while True:
        flat = await conn.run("keyslice", [waiting_set], [start, start + SLICE - 1])
        for i in range(1, len(flat), 2):
            code = flat[i]
            into[(task, code[1:].decode() if code[:1] == b"1" else None)] += int(flat[i + 1])
        if int(flat[0]) < SLICE:
            return
        start += SLICE


async def rate_key_usage(
    conn: RedisConnection, rates: Mapping[str, RateLimit], limit: int
) -> list[RateKeyUse]:
    """Each asked task's window index (``rki:`` sorted set, kept by the claim),
    walked with ``ZSCAN`` (every member there throughout is seen, though claims
    move scores meanwhile), keeping the windows whose last start is in the
    period; then one ``ZCOUNT`` per window log on Redis's clock. Its cost grows
    with the tasks' windows started lately, never with the other keys."""
    client, _ = conn.ready()
    uses: list[RateKeyUse] = []
    async with conn.errors("rate_key_usage"):
        seconds, micros = await client.time()
        now = seconds + micros / 1_000_000
        for task, rate in rates.items():
            since = now - rate.period
            seen: set[str | None] = set()
            cursor = 0
            while True:
                cursor, page = await client.zscan(conn.keys.rate_windows(task), cursor, count=SLICE)
                keys = [_key_of(code) for code, last in page if last > since]
                keys = [key for key in keys if key not in seen]  # ZSCAN may repeat one
                seen.update(keys)
                pipe = client.pipeline(transaction=False)
                for key in keys:
                    pipe.zcount(conn.keys.rate_window(task, key), f"({since!r}", "+inf")
                for key, used in zip(keys, await pipe.execute(), strict=True):
                    uses.append(RateKeyUse(task, key, int(used)))
                if cursor == 0:
                    break
    return rank_rate_key_uses(uses, limit)


def _key_of(code: bytes) -> str | None:
    """The ``rate_limit_key`` of an index member: ``0`` none, ``1<key>`` a key."""
    return code[1:].decode() if code[:1] == b"1" else None

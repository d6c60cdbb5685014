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

#: Ids read per round trip (of the active index or a waiting set, or SCAN's COUNT).
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
    """The windows' logs (``rk:`` sorted sets) found by one ``SCAN`` of the
    app's keys (its cost grows with every key in the database, not with the
    windows), then one ``ZCOUNT`` per window on Redis's clock."""
    client, _ = conn.ready()
    heads = {conn.keys.rate_window(task, None): task for task in rates}
    pattern = conn.keys.pattern()[:-1] + "rk:*"
    uses: list[RateKeyUse] = []
    async with conn.errors("rate_key_usage"):
        seconds, micros = await client.time()
        now = seconds + micros / 1_000_000
        found: list[tuple[str, str | None, str]] = []
        async for raw in client.scan_iter(match=pattern, count=SLICE):
            name = raw.decode()
            window = _window_of(name, heads)
            if window is not None:
                found.append((*window, name))
        for i in range(0, len(found), SLICE):
            chunk = found[i : i + SLICE]
            pipe = client.pipeline(transaction=False)
            for task, _key, name in chunk:
                pipe.zcount(name, f"({now - rates[task].period!r}", "+inf")
            for (task, key, _name), used in zip(chunk, await pipe.execute(), strict=True):
                uses.append(RateKeyUse(task, key, int(used)))
    return rank_rate_key_uses(uses, limit)


def _window_of(name: str, heads: Mapping[str, str]) -> tuple[str, str | None] | None:
    """``(task, rate_limit_key)`` of the window log ``name``, if its task is asked
    (a head ``rk:<len>:<task>`` names its task's length, so one split fits)."""
    if name in heads:
        return heads[name], None
    for at, char in enumerate(name):
        if char == ":" and name[:at] in heads:
            return heads[name[:at]], name[at + 1 :]
    return None

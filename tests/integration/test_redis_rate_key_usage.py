"""Redis ``rate_key_usage`` reads each task's window index (``rki:``), kept by
the claim, never the keyspace: its calls do not grow with unrelated keys."""

from __future__ import annotations

import asyncio
from pathlib import Path

import redis
from redis_servers import RedisServer

from conveyor.backends.base import RateKeyUse
from conveyor.backends.redis import RedisBackend
from conveyor.ratelimit import RateLimit
from conveyor.testing.conformance.suite.helpers import claim, new_job

UNRELATED = 20_000


def _calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


async def test_the_read_walks_the_window_index_not_the_keyspace(tmp_path: Path) -> None:
    rates = {"keyed": RateLimit(3, 60.0), "other": RateLimit(3, 60.0)}
    # A server of its own: the shared one's command counts move with other tests.
    with RedisServer(tmp_path / "usage") as server:
        client = redis.Redis(port=server.port)
        backend = RedisBackend(server.url())
        await backend.open()
        try:
            pipe = client.pipeline(transaction=False)
            for n in range(0, UNRELATED, 1000):
                pipe.mset({f"unrelated:rk:{m}": b"x" for m in range(n, n + 1000)})
            pipe.execute()
            keys = ("a",) * 4 + ("b", "x:y", None)
            await backend.enqueue_jobs([new_job("keyed", rate_limit_key=k) for k in keys])
            assert len((await claim(backend, key_rate_limits=rates)).jobs) == 6
            client.config_resetstat()

            assert await backend.rate_key_usage(rates) == [
                RateKeyUse("keyed", "a", 3),
                RateKeyUse("keyed", None, 1),
                RateKeyUse("keyed", "b", 1),
                RateKeyUse("keyed", "x:y", 1),
            ]
            calls = _calls(client)
            assert "scan" not in calls
            assert "keys" not in calls
            assert calls["zscan"] == 2  # one page of each task's index
            assert calls["zcount"] == 4  # one per window found
            assert sum(calls.values()) < 10
        finally:
            await backend.close()
            client.close()


async def test_the_claim_trims_windows_that_left_the_period(tmp_path: Path) -> None:
    short = {"keyed": RateLimit(5, 0.2)}
    with RedisServer(tmp_path / "trim") as server:
        client = redis.Redis(port=server.port)
        backend = RedisBackend(server.url())
        await backend.open()
        try:
            index = backend.keys.rate_windows("keyed")
            await backend.enqueue_jobs([new_job("keyed", rate_limit_key=k) for k in ("a", None)])
            await claim(backend, key_rate_limits=short)
            assert sorted(client.zrange(index, 0, -1)) == [b"0", b"1a"]
            assert 0 < client.pttl(index) <= 1200  # expires with the windows
            await asyncio.sleep(0.3)
            await backend.enqueue_jobs([new_job("keyed", rate_limit_key="b")])
            await claim(backend, key_rate_limits=short)
            assert client.zrange(index, 0, -1) == [b"1b"]
            assert await backend.rate_key_usage(short) == [RateKeyUse("keyed", "b", 1)]
        finally:
            await backend.close()
            client.close()

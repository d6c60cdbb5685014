"""Stores that worker "hosts" in network namespaces reach over their veth links,
and the overlap check of the tests that partition or slow those links."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from chaos_apps.recorder import Run
from postgres_servers import OwnServer
from redis_servers import RedisServer


@contextlib.asynccontextmanager
async def reachable_store(
    store: str, directory: Path, addresses: Sequence[str]
) -> AsyncIterator[tuple[str, dict[str, str]]]:
    """A private server listening on 127.0.0.1 and on each of ``addresses``
    (the host's ends of veth links): ``(url from the host, {address: url})``."""
    if store == "redis":
        redis = RedisServer(
            directory, ["--bind", "127.0.0.1", *addresses, "--protected-mode", "no"]
        )
        redis.start()
        try:
            local = redis.url("hosts")
            yield local, {addr: local.replace("127.0.0.1", addr) for addr in addresses}
        finally:
            redis.kill()
        return
    postgres = OwnServer(listen=tuple(addresses))
    try:
        await asyncio.to_thread(postgres.init)
        await asyncio.to_thread(postgres.start)
        local = f"{postgres.url}?schema=conveyor&connect_timeout=2&command_timeout=5"
        yield local, {addr: local.replace("127.0.0.1", addr) for addr in addresses}
    finally:
        await asyncio.to_thread(postgres.destroy)


def via(url: str, host: str, port: int) -> str:
    """``url`` with its server's address replaced by ``host:port`` (a proxy's)."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{host}:{port}" if userinfo else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def server_port(url: str) -> int:
    port = urlsplit(url).port
    if port is None:
        raise ValueError(f"{url!r} names no port")
    return port


def overlapping(runs: list[Run]) -> list[str]:
    """Jobs with two runs whose windows overlap (or a run that never ended
    followed by another)."""
    by_job: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_job[run.job_id].append(run)
    bad = []
    for job_id, job_runs in by_job.items():
        job_runs.sort(key=lambda run: run.started)
        for first, second in itertools.pairwise(job_runs):
            if first.ended is None or first.ended > second.started:
                bad.append(job_id)
                break
    return bad

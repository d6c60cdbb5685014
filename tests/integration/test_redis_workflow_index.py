"""Redis reads a workflow's jobs through its index (``wfj:``), kept by enqueue
and every delete, not by a walk over every job of the store."""

from __future__ import annotations

from pathlib import Path

import redis
from redis_servers import RedisServer

from conveyor.backends.base import JobFilter
from conveyor.backends.redis import RedisBackend
from conveyor.ids import new_id
from conveyor.job import JobState
from conveyor.testing.conformance.suite.helpers import make_failed, new_job

UNRELATED = 2_000


def _calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


async def test_a_workflow_read_touches_its_own_jobs_only(tmp_path: Path) -> None:
    # A server of its own: the shared one's command counts move with other tests.
    with RedisServer(tmp_path / "wf") as server:
        client = redis.Redis(port=server.port)
        backend = RedisBackend(server.url())
        await backend.open()
        try:
            for _ in range(0, UNRELATED, 500):
                await backend.enqueue_jobs([new_job("plain") for _ in range(500)])
            workflow_id = new_id()
            first = new_job("step", workflow_id=workflow_id)
            steps = [
                first,
                *(
                    new_job("step", workflow_id=workflow_id, depends_on=[first.id])
                    for _ in range(2)
                ),
            ]
            await backend.enqueue_jobs(steps)
            await backend.enqueue_jobs([new_job("plain") for _ in range(10)])
            mine = sorted((s.id for s in steps), reverse=True)
            index = backend.keys.workflow_jobs(workflow_id)
            assert sorted(client.zrange(index, 0, -1), reverse=True) == [i.encode() for i in mine]

            client.config_resetstat()
            listed = await backend.list_jobs(JobFilter(workflow_id=workflow_id))
            assert [job.id for job in listed] == mine
            blocked = JobFilter(workflow_id=workflow_id, states=[JobState.BLOCKED])
            assert await backend.count_jobs(blocked) == 2
            calls = _calls(client)
            assert calls.get("hmget", 0) <= 2 * len(steps)  # the old walk: one per job stored
            assert sum(calls.values()) < 40

            # A workflow stored before the index existed has none: the scan answers.
            client.delete(index)
            listed = await backend.list_jobs(JobFilter(workflow_id=workflow_id), offset=1)
            assert [job.id for job in listed] == mine[1:]

            # Deleting jobs takes them out of the index; the last one takes the key.
            await backend.enqueue_jobs([new_job("step", workflow_id=(other := new_id()))])
            others = backend.keys.workflow_jobs(other)
            assert client.zcard(others) == 1
            assert await backend.purge_jobs(JobFilter(workflow_id=other)) == 1
            assert not client.exists(others)
            assert await backend.list_jobs(JobFilter(workflow_id=other)) == []
        finally:
            await backend.close()
            client.close()


async def test_a_retry_joins_an_index_but_never_starts_one(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "retry") as server:
        client = redis.Redis(port=server.port)
        backend = RedisBackend(server.url())
        await backend.open()
        try:
            indexed, unindexed = new_id(), new_id()
            kept = await make_failed(backend, "step", workflow_id=indexed)
            old = await make_failed(backend, "step", workflow_id=unindexed)
            # As a workflow stored before the index existed.
            client.delete(backend.keys.workflow_jobs(unindexed))

            copy = await backend.retry_failed(kept.id, new_id())
            assert client.zrange(backend.keys.workflow_jobs(indexed), 0, -1) == sorted(
                [kept.id.encode(), copy.id.encode()]
            )
            late = await backend.retry_failed(old.id, new_id())
            assert not client.exists(backend.keys.workflow_jobs(unindexed))
            listed = await backend.list_jobs(JobFilter(workflow_id=unindexed))
            assert [job.id for job in listed] == [late.id, old.id]
        finally:
            await backend.close()
            client.close()

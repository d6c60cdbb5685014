"""Running the enqueue function on a given connection: the pool's, or the
caller's own (transactional enqueue).

asyncpg connections run exactly what the pool's connections run
(enqueue.run_on_asyncpg); psycopg 3 async connections get the ``enqueue``
statement with ``%s`` placeholders. Either way the
insert happens inside whatever transaction the connection has open, so the
jobs commit or roll back with the caller's data, and the NOTIFY that wakes
workers is delivered only at commit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from conveyor.backends.base import NewJob
from conveyor.backends.postgres import enqueue as enq
from conveyor.backends.postgres.connection import enqueue_refusal
from conveyor.backends.postgres.decode import job_from_row
from conveyor.backends.postgres.queries import Queries
from conveyor.errors import ConfigurationError
from conveyor.job import Job
from conveyor.serialization import dumps_str

_DOLLAR = re.compile(r"\$\d+")


def _psycopg_sql(sql: str) -> str:
    return _DOLLAR.sub("%s", sql)


async def run_enqueue_on(connection: Any, q: Queries, jobs: Sequence[NewJob]) -> list[Job]:
    if _is_asyncpg(connection):
        return await enq.run_on_asyncpg(connection, q, jobs)
    if _is_psycopg(connection):
        batch = enq.split(jobs)
        return await _on_psycopg(connection, q, batch, batch.arguments())
    raise ConfigurationError(
        f"connection: {type(connection).__name__} is not an asyncpg connection or a "
        "psycopg 3 AsyncConnection"
    )


def _jsonb_as_text(row: Sequence[Any]) -> list[Any]:
    """psycopg parses jsonb (the errors column); decode.py expects its text."""
    values = list(row)
    if values[28] is not None and not isinstance(values[28], str | bytes):
        values[28] = dumps_str(values[28])
    return values


def _is_asyncpg(connection: Any) -> bool:
    """An asyncpg connection, or one lent by an asyncpg pool."""
    return isinstance(connection, asyncpg.Connection | PoolConnectionProxy)


def _is_psycopg(connection: Any) -> bool:
    module = type(connection).__module__
    return module.startswith("psycopg") and hasattr(connection, "cursor")


async def _on_psycopg(connection: Any, q: Queries, batch: enq.Batch, args: list[Any]) -> list[Job]:
    import psycopg

    try:
        async with connection.cursor() as cur:
            await cur.execute(_psycopg_sql(batch.statement(q)), args)
            reply = enq.read_reply(await cur.fetchall())
            existing: dict[str, Job] = {}
            if reply.duplicates:
                ids = [dup[0] for dup in reply.duplicates.values()]
                await cur.execute(_psycopg_sql(q.jobs_by_ids), [ids])
                existing = {
                    row[0]: job_from_row(_jsonb_as_text(row)) for row in await cur.fetchall()
                }
    except psycopg.Error as exc:
        refusal = enqueue_refusal(
            exc.sqlstate,
            exc.diag.message_primary,
            exc.diag.message_detail,
            exc.diag.message_hint,
        )
        if refusal is not None:
            raise refusal from None
        raise
    return enq.build_jobs(batch, reply, existing)

"""The named SQL of ``queries.sql``, parsed once, bound to one schema.

Blocks are read once at import; :func:`for_schema` substitutes the quoted
schema name and the notification channel (validated identifiers, see url.py)
and caches the result, so every backend on one schema shares the same strings
(and asyncpg's per-connection statement cache hits on them).
"""

from __future__ import annotations

import dataclasses
import functools
from importlib import resources

from conveyor.backends.namedsql import parse_named_blocks


def substitute(sql: str, schema: str, channel: str) -> str:
    """``sql`` with the schema and channel placeholders filled in."""
    return sql.replace("__schema__", f'"{schema}"').replace("__channel__", channel)


@dataclasses.dataclass(frozen=True, slots=True)
class Queries:
    """Every statement, by name. Declared here so a typo fails type checking."""

    enqueue: str
    enqueue_plain: str
    claim: str
    settle: str
    warm_claim: str
    warm_settle: str
    complete: str
    renew: str
    save_progress: str
    next_due: str
    has_waiting: str
    now: str
    jobs_by_ids: str
    list_jobs: str
    count_jobs: str
    count_state: str
    counts_by_queue: str
    queue_rows: str
    oldest_waiting: str
    cancel_requested_of: str
    cancel_job: str
    retry_target_for_update: str
    insert_retry_copy: str
    mark_retried: str
    notify: str
    delete_jobs: str
    purge_chunk: str
    recover_stalled: str
    prune_by_age: str
    prune_by_count: str
    prune_keys: str
    prune_rate_starts: str
    configure_queue: str
    set_queue_paused: str
    queue_names_with_jobs: str
    list_circuits: str
    reset_circuit: str
    record_heartbeat: str
    list_workers: str
    remove_worker: str
    prune_workers: str
    schedules_for_update: str
    insert_schedule: str
    replace_schedule: str
    schedules_by_name: str
    update_schedule: str
    advance_schedule: str
    delete_schedules: str
    add_stat_totals: str
    add_stat_series: str
    stat_totals: str
    stat_series: str
    prune_stat_series: str
    ping: str


def _load_blocks() -> dict[str, str]:
    text = (
        resources.files("conveyor.backends.postgres")
        .joinpath("queries.sql")
        .read_text(encoding="utf-8")
    )
    blocks = parse_named_blocks(text)
    declared = {f.name for f in dataclasses.fields(Queries)}
    if declared != blocks.keys():
        raise RuntimeError(
            f"queries.sql does not match Queries: missing {sorted(declared - blocks.keys())}, "
            f"undeclared {sorted(blocks.keys() - declared)}"
        )
    return blocks


_BLOCKS = _load_blocks()


@functools.cache
def for_schema(schema: str, channel: str) -> Queries:
    return Queries(**{name: substitute(sql, schema, channel) for name, sql in _BLOCKS.items()})

"""The named SQL of ``queries.sql`` and ``migrate.sql``, parsed once, bound to
one schema.

Blocks are read once at import; :func:`for_schema` substitutes the quoted
schema name and the notification channel (validated identifiers, see url.py)
and caches the result, so every backend on one schema shares the same strings
(and asyncpg's per-connection statement cache hits on them).

Each statement is a ``LiteralString``, like SQLite's: SQL cannot be built from
runtime strings and still type-check, so values only arrive as bound parameters.
"""

from __future__ import annotations

import dataclasses
import functools
from importlib import resources
from typing import LiteralString, TypeVar

from conveyor.backends.namedsql import parse_named_blocks, trusted_sql
from conveyor.backends.postgres.url import validate_schema

_PACKAGE = "conveyor.backends.postgres"


def substitute(sql: str, schema: str, channel: str) -> LiteralString:
    """``sql`` (a file of this package) with the schema and channel placeholders
    filled in.

    The one place substituted PostgreSQL text becomes ``LiteralString``. Safe:
    ``sql`` comes from a file shipped in this package, the schema name must be a
    plain lower-case identifier (checked again here, it is quoted in), and the
    channel is ``<schema>_work`` (see url.py), so no input reaches the SQL text.
    """
    validate_schema(schema)
    return trusted_sql(sql.replace("__schema__", f'"{schema}"').replace("__channel__", channel))


@dataclasses.dataclass(frozen=True, slots=True)
class Queries:
    """Every statement, by name. Declared here so a typo fails type checking."""

    enqueue: LiteralString
    enqueue_rate_keyed: LiteralString
    enqueue_plain: LiteralString
    claim: LiteralString
    settle: LiteralString
    warm_claim: LiteralString
    warm_settle: LiteralString
    complete: LiteralString
    complete_claim: LiteralString
    settle_claim: LiteralString
    renew: LiteralString
    save_progress: LiteralString
    next_due: LiteralString
    has_waiting: LiteralString
    now: LiteralString
    jobs_by_ids: LiteralString
    list_jobs: LiteralString
    count_jobs: LiteralString
    list_workflow_jobs: LiteralString
    count_workflow_jobs: LiteralString
    count_state: LiteralString
    counts_by_queue: LiteralString
    queue_rows: LiteralString
    oldest_waiting: LiteralString
    cancel_requested_of: LiteralString
    cancel_job: LiteralString
    retry_target_for_update: LiteralString
    insert_retry_copy: LiteralString
    cancelled_dependents: LiteralString
    dependency_states_for_update: LiteralString
    resume_dependents: LiteralString
    add_dependency_edges: LiteralString
    mark_retried: LiteralString
    notify: LiteralString
    delete_jobs: LiteralString
    purge_chunk: LiteralString
    recover_stalled: LiteralString
    prune_by_age: LiteralString
    prune_by_count: LiteralString
    count_threshold: LiteralString
    finished_workflows: LiteralString
    workflow_rows: LiteralString
    delete_workflows: LiteralString
    prune_keys: LiteralString
    prune_rate_starts: LiteralString
    prune_fair_passes: LiteralString
    prune_rate_key_starts: LiteralString
    configure_queue: LiteralString
    configure_queue_plain: LiteralString
    configure_queue_fair: LiteralString
    lock_jobs_for_fairness: LiteralString
    mark_queue_fair: LiteralString
    tenant_counts: LiteralString
    key_counts: LiteralString
    rate_key_usage: LiteralString
    set_queue_paused: LiteralString
    undispatch_queue: LiteralString
    queue_names_with_jobs: LiteralString
    list_circuits: LiteralString
    reset_circuit: LiteralString
    clear_circuit_failures: LiteralString
    record_heartbeat: LiteralString
    list_workers: LiteralString
    remove_worker: LiteralString
    prune_workers: LiteralString
    schedules_for_update: LiteralString
    insert_schedule: LiteralString
    replace_schedule: LiteralString
    schedules_by_name: LiteralString
    update_schedule: LiteralString
    advance_schedule: LiteralString
    delete_schedules: LiteralString
    add_stat_totals: LiteralString
    add_stat_series: LiteralString
    stat_totals: LiteralString
    stat_series: LiteralString
    prune_stat_series: LiteralString
    ping: LiteralString


@dataclasses.dataclass(frozen=True, slots=True)
class MigrationQueries:
    """The statements of ``migrate.sql``, around the numbered migrations."""

    migrations_table_exists: LiteralString
    current_version: LiteralString
    lock_schema: LiteralString
    create_schema: LiteralString
    create_migrations_table: LiteralString
    record_migration: LiteralString


_Named = TypeVar("_Named", Queries, MigrationQueries)


def _load_blocks(filename: str, declared_by: type[_Named]) -> dict[str, str]:
    text = resources.files(_PACKAGE).joinpath(filename).read_text(encoding="utf-8")
    blocks = parse_named_blocks(text)
    declared = {f.name for f in dataclasses.fields(declared_by)}
    if declared != blocks.keys():
        raise RuntimeError(
            f"{filename} does not match {declared_by.__name__}: missing "
            f"{sorted(declared - blocks.keys())}, undeclared {sorted(blocks.keys() - declared)}"
        )
    return blocks


_BLOCKS = _load_blocks("queries.sql", Queries)
_MIGRATION_BLOCKS = _load_blocks("migrate.sql", MigrationQueries)


def _bind(cls: type[_Named], blocks: dict[str, str], schema: str, channel: str) -> _Named:
    return cls(**{name: substitute(sql, schema, channel) for name, sql in blocks.items()})


@functools.cache
def for_schema(schema: str, channel: str) -> Queries:
    return _bind(Queries, _BLOCKS, schema, channel)


@functools.cache
def migration_queries(schema: str) -> MigrationQueries:
    return _bind(MigrationQueries, _MIGRATION_BLOCKS, schema, f"{schema}_work")

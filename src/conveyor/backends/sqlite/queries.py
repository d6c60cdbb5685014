"""The named SQL of ``queries.sql`` and ``pragmas.sql``, parsed once into typed
attributes (``Q`` and ``P``), and how values travel as JSON array parameters.

Each attribute is a ``LiteralString``: SQL cannot be built from runtime strings
and still type-check, so values can only ever arrive as bound parameters.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Mapping
from importlib import resources
from typing import Any, LiteralString

from conveyor.backends.namedsql import parse_named_blocks, trusted_sql
from conveyor.errors import BackendError
from conveyor.serialization import dumps_str

_PACKAGE = "conveyor.backends.sqlite"

#: The columns every job-returning statement selects, in this order (see decode.py).
JOB_COLUMNS = (
    "id, task, queue, state, priority, attempts, max_attempts, timeout, run_at, created_at, "
    "started_at, finished_at, expires_at, ttl, lease_until, lease_token, worker_id, stalls, "
    "failure_reason, idempotency_key, tenant, retried_as, retry_of, cancel_requested, "
    "payload, metadata, result, progress, errors, depends_on, on_dependency_failure, "
    "workflow_id, concurrency_key, rate_limit_key"
)
#: Where ``has_dependents`` sits in the rows of the statements that finish jobs
#: and return them (expire_due, cancel_job, recover_stalled): right after
#: JOB_COLUMNS, so the job decoder ignores it.
HAS_DEPENDENTS = len(JOB_COLUMNS.split(","))

#: A result, progress or payload bigger than this is bound on its own rather
#: than copied into a batch's JSON array parameter.
INLINE_MAX = 64 * 1024


def json_param(values: Any) -> str:
    """A JSON array (or object) parameter for ``json_each(?)`` (bound as text, never
    formatted in)."""
    return dumps_str(values)


@dataclasses.dataclass(frozen=True, slots=True)
class Queries:
    """Every statement, by name. Declared here so a typo fails type checking."""

    # enqueue
    queue_configs: LiteralString
    live_keys: LiteralString
    count_pending: LiteralString
    insert_job: LiteralString
    insert_fair_job: LiteralString
    insert_plain_job: LiteralString
    insert_job_run: LiteralString
    dependency_states: LiteralString
    insert_workflow_job: LiteralString
    add_dependencies: LiteralString
    mark_has_dependents: LiteralString
    postpone_job: LiteralString
    renew_key: LiteralString
    upsert_key: LiteralString
    # claim
    promote_due: LiteralString
    expire_due: LiteralString
    open_circuits: LiteralString
    claim_fast: LiteralString
    claim_candidates: LiteralString
    claim_key_candidates: LiteralString
    claim_rate_key_candidates: LiteralString
    key_slots_used: LiteralString
    claim_ids: LiteralString
    fair_queues: LiteralString
    fair_heads: LiteralString
    fair_heads_unfiltered: LiteralString
    fair_first_heads: LiteralString
    plain_heads: LiteralString
    fair_level: LiteralString
    fair_ahead: LiteralString
    fair_pass_set: LiteralString
    fair_tenant_waits: LiteralString
    fair_tenant_drop: LiteralString
    queue_fairness: LiteralString
    mark_queue_fair: LiteralString
    fair_tenants_fill: LiteralString
    fair_tenants_clear: LiteralString
    fair_vtime: LiteralString
    rate_trim: LiteralString
    rate_used: LiteralString
    rate_record: LiteralString
    rate_key_trim: LiteralString
    rate_key_used: LiteralString
    rate_key_record: LiteralString
    circuit_trial: LiteralString
    # renew, settle, progress
    leases_of: LiteralString
    renew_lease: LiteralString
    save_progress: LiteralString
    settle_job: LiteralString
    complete_jobs: LiteralString
    circuits_of: LiteralString
    upsert_circuit: LiteralString
    # waiting
    data_version: LiteralString
    next_due: LiteralString
    # reads
    jobs_by_ids: LiteralString
    list_jobs: LiteralString
    list_workflow_jobs: LiteralString
    count_workflow_jobs: LiteralString
    list_rare_finished: LiteralString
    count_rare_finished: LiteralString
    count_jobs: LiteralString
    count_waiting: LiteralString
    count_delayed: LiteralString
    count_active: LiteralString
    count_blocked: LiteralString
    count_finished: LiteralString
    counts_by_queue: LiteralString
    queue_rows: LiteralString
    oldest_waiting: LiteralString
    cancel_requested_of: LiteralString
    # dependencies
    cancel_dependents: LiteralString
    take_dependents: LiteralString
    release_dependents: LiteralString
    # acting on jobs
    cancel_job: LiteralString
    retry_target: LiteralString
    insert_retry_copy: LiteralString
    cancelled_dependents: LiteralString
    resume_dependent: LiteralString
    mark_retried: LiteralString
    delete_jobs: LiteralString
    purge_jobs: LiteralString
    remember_final_state: LiteralString
    # maintenance
    recover_stalled: LiteralString
    prune_by_age: LiteralString
    prune_by_count: LiteralString
    count_threshold: LiteralString
    finished_workflows: LiteralString
    workflow_rows: LiteralString
    delete_workflows: LiteralString
    prune_keys: LiteralString
    prune_rate_starts: LiteralString
    prune_rate_key_starts: LiteralString
    # queues, circuits, heartbeats
    configure_queue: LiteralString
    tenant_counts: LiteralString
    key_counts: LiteralString
    rate_key_usage: LiteralString
    set_queue_paused: LiteralString
    undispatch_queue: LiteralString
    list_circuits: LiteralString
    reset_circuit: LiteralString
    clear_circuit_failures: LiteralString
    record_heartbeat: LiteralString
    list_workers: LiteralString
    remove_worker: LiteralString
    prune_workers: LiteralString
    ping: LiteralString

    @classmethod
    def from_text(cls, text: str) -> Queries:
        blocks = parse_named_blocks(text)
        declared = {f.name for f in dataclasses.fields(cls)}
        missing = declared - blocks.keys()
        extra = blocks.keys() - declared
        if missing or extra:
            raise RuntimeError(
                f"queries.sql does not match Queries: missing {sorted(missing)}, "
                f"undeclared {sorted(extra)}"
            )
        check_job_columns("queries.sql", blocks)
        return cls(**{name: trusted_sql(sql) for name, sql in blocks.items()})


def check_job_columns(source: str, blocks: Mapping[str, str]) -> None:
    """Refuse a statement of ``source`` that returns jobs in other than
    ``JOB_COLUMNS`` order: the decoder reads columns by position, so a column a
    later migration added and a statement left out would fail only at run time."""
    columns = " ".join(JOB_COLUMNS.split())
    for name, sql in blocks.items():
        flat = " ".join(sql.split())
        returns_jobs = "RETURNING id, task," in flat or flat.startswith(
            "SELECT id, task, queue, state"
        )
        if returns_jobs and columns not in flat:
            raise RuntimeError(f"{source}: {name!r} does not return JOB_COLUMNS")


def split_statements(script: str) -> list[str]:
    """The statements of ``script``, one per item (comments kept with the next one).

    ``executescript`` cannot be used: it commits any open transaction first.
    """
    statements: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    rest = "\n".join(
        ln for ln in pending.splitlines() if ln.strip() and not ln.strip().startswith("--")
    )
    if rest.strip():
        raise BackendError(f"incomplete SQL statement at the end of a script: {rest.strip()!r}")
    return statements


@dataclasses.dataclass(frozen=True, slots=True)
class Pragmas:
    """The blocks of ``pragmas.sql``, each a tuple of statements run in order."""

    journal_wal: tuple[LiteralString, ...]
    synchronous_off: tuple[LiteralString, ...]
    synchronous_normal: tuple[LiteralString, ...]
    synchronous_full: tuple[LiteralString, ...]
    synchronous_extra: tuple[LiteralString, ...]
    tuning: tuple[LiteralString, ...]
    writer_tuning: tuple[LiteralString, ...]
    checkpointer_tuning: tuple[LiteralString, ...]
    checkpoint: tuple[LiteralString, ...]
    user_version: tuple[LiteralString, ...]

    def synchronous(self, level: str) -> tuple[LiteralString, ...]:
        """The statement for a ``?synchronous=`` level (validated by url.py)."""
        by_level = {
            "OFF": self.synchronous_off,
            "NORMAL": self.synchronous_normal,
            "FULL": self.synchronous_full,
            "EXTRA": self.synchronous_extra,
        }
        return by_level[level]

    @classmethod
    def from_text(cls, text: str) -> Pragmas:
        blocks = parse_named_blocks(text)
        declared = {f.name for f in dataclasses.fields(cls)}
        if declared != blocks.keys():
            raise RuntimeError(
                f"pragmas.sql does not match Pragmas: missing {sorted(declared - blocks.keys())}, "
                f"undeclared {sorted(blocks.keys() - declared)}"
            )
        return cls(
            **{
                # parse_named_blocks drops the block's final ";"; the splitter needs it
                name: tuple(trusted_sql(s) for s in split_statements(sql + ";"))
                for name, sql in blocks.items()
            }
        )


def _read(name: str) -> str:
    return resources.files(_PACKAGE).joinpath(name).read_text(encoding="utf-8")


#: The parsed statements, loaded once at import.
Q = Queries.from_text(_read("queries.sql"))
#: The PRAGMA statements, loaded once at import.
P = Pragmas.from_text(_read("pragmas.sql"))

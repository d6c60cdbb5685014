"""The named SQL of ``queries.sql``, parsed once into typed attributes.

Each attribute is a ``LiteralString``: SQL cannot be built from runtime strings
and still type-check, so values can only ever arrive as bound parameters.
"""

from __future__ import annotations

import dataclasses
from importlib import resources
from typing import Any, LiteralString, cast

from conveyor.backends.namedsql import parse_named_blocks

#: The columns every job-returning statement selects, in this order (see decode.py).
JOB_COLUMNS = (
    "id, task, queue, state, priority, attempts, max_attempts, timeout, run_at, created_at, "
    "started_at, finished_at, expires_at, ttl, lease_until, lease_token, worker_id, stalls, "
    "failure_reason, idempotency_key, tenant, retried_as, retry_of, cancel_requested, "
    "payload, metadata, result, progress, errors"
)


def trusted_sql(text: str) -> LiteralString:
    """Mark SQL read from a file shipped inside this package (never from input)
    as a literal. The one place where file text becomes ``LiteralString``."""
    literal: LiteralString = cast(Any, text)
    return literal


@dataclasses.dataclass(frozen=True, slots=True)
class Queries:
    """Every statement, by name. Declared here so a typo fails type checking."""

    # enqueue
    queue_configs: LiteralString
    live_keys: LiteralString
    count_pending: LiteralString
    insert_job: LiteralString
    insert_plain_job: LiteralString
    insert_job_run: LiteralString
    upsert_key: LiteralString
    # claim
    promote_due: LiteralString
    expire_due: LiteralString
    open_circuits: LiteralString
    claim_fast: LiteralString
    claim_candidates: LiteralString
    claim_ids: LiteralString
    rate_trim: LiteralString
    rate_used: LiteralString
    rate_record: LiteralString
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
    list_rare_finished: LiteralString
    count_rare_finished: LiteralString
    count_jobs: LiteralString
    count_waiting: LiteralString
    count_delayed: LiteralString
    count_active: LiteralString
    count_finished: LiteralString
    counts_by_queue: LiteralString
    queue_rows: LiteralString
    oldest_waiting: LiteralString
    cancel_requested_of: LiteralString
    # acting on jobs
    cancel_job: LiteralString
    retry_target: LiteralString
    insert_retry_copy: LiteralString
    mark_retried: LiteralString
    delete_jobs: LiteralString
    purge_jobs: LiteralString
    remember_final_state: LiteralString
    # maintenance
    recover_stalled: LiteralString
    prune_by_age: LiteralString
    prune_by_count: LiteralString
    prune_keys: LiteralString
    prune_rate_starts: LiteralString
    # queues, circuits, heartbeats
    configure_queue: LiteralString
    set_queue_paused: LiteralString
    list_circuits: LiteralString
    reset_circuit: LiteralString
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
        columns = " ".join(JOB_COLUMNS.split())
        for name, sql in blocks.items():
            flat = " ".join(sql.split())
            if ("RETURNING id," in flat or flat.startswith("SELECT id, task, queue, state")) and (
                columns not in flat
            ):
                raise RuntimeError(f"queries.sql: {name!r} does not return JOB_COLUMNS")
        return cls(**{name: trusted_sql(sql) for name, sql in blocks.items()})


def _load() -> Queries:
    text = (
        resources.files("conveyor.backends.sqlite")
        .joinpath("queries.sql")
        .read_text(encoding="utf-8")
    )
    return Queries.from_text(text)


#: The parsed statements, loaded once at import.
Q = _load()

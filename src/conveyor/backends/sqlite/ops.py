"""The hot path as synchronous transactions: enqueue, claim, renew, settle, progress.

Each public function here is the whole body of ONE transaction and runs in the
writer connection's thread (see connection.py); ``now`` is read inside it, on
the host clock, which is the backend's clock for an embedded database (G11).
Functions may run more than once (a busy database is retried from the start),
so they keep no state outside the connection.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from conveyor.backends.base import (
    CircuitInfo,
    CircuitState,
    ClaimRequest,
    ClaimResult,
    NewJob,
    Outcome,
    RenewResult,
    Settlement,
    SettleResult,
)
from conveyor.backends.rows import decode_fields
from conveyor.backends.sqlite.decode import Row, claim_order, job_from_row
from conveyor.backends.sqlite.queries import Q
from conveyor.errors import QueueFull
from conveyor.ids import new_token
from conveyor.job import FailureReason, Job, JobState
from conveyor.serialization import dumps_str, loads

_STATES = {s.value: s for s in JobState}
_NO_CONFIG: tuple[int | None, float | None] = (None, None)
_CLOSED = CircuitState.CLOSED.value
_OPEN = CircuitState.OPEN.value
_HALF_OPEN = CircuitState.HALF_OPEN.value


def _json(values: Any) -> str:
    """A JSON array parameter for ``json_each(?)`` (bound as text, never formatted in)."""
    return dumps_str(values)


# -- enqueue -------------------------------------------------------------------


def enqueue(conn: sqlite3.Connection, jobs: Sequence[NewJob]) -> list[Job]:
    """Insert ``jobs`` (one transaction); duplicates by idempotency key insert nothing."""
    now = time.time()
    names = list(dict.fromkeys(j.queue for j in jobs))
    configs: dict[str, tuple[int | None, float | None]] = {
        name: (max_size, ttl)
        for name, max_size, ttl in conn.execute(Q.queue_configs, {"names": _json(names)})
    }
    known: dict[str, Job] = {}
    if any(j.idempotency_key is not None for j in jobs):
        known = _live_keys(conn, jobs, now)

    results: list[Job] = []
    runs: dict[tuple[Any, ...], list[NewJob]] = {}  # plain jobs, by what they share
    rows: list[tuple[Any, ...]] = []  # insert_job
    key_rows: list[tuple[Any, ...]] = []
    added: dict[str, int] = {}
    waiting, delayed = JobState.WAITING, JobState.DELAYED
    for nj in jobs:
        key = nj.idempotency_key
        if key is not None:
            existing = known.get(key)
            if existing is not None:
                results.append(replace(existing, duplicate=True))
                continue
        queue = nj.queue
        run_at = nj.run_at if nj.run_at is not None else now + nj.delay
        state = delayed if run_at > now else waiting
        ttl = nj.ttl  # the effective TTL, stored: every later wait gets it afresh
        config = configs.get(queue)
        if config is not None:
            queue_ttl = config[1]
            if queue_ttl is not None and (ttl is None or queue_ttl < ttl):
                ttl = queue_ttl
        expires_at = None if ttl is None else run_at + ttl
        if (
            ttl is None
            and key is None
            and nj.timeout is None
            and nj.tenant is None
            and nj.retry_of is None
            and nj.metadata is None
        ):
            shared = (nj.task, queue, state.value, nj.priority, nj.max_attempts, run_at)
            run = runs.get(shared)
            if run is None:
                runs[shared] = run = []
            run.append(nj)
        else:
            rows.append(
                (
                    nj.id,
                    nj.task,
                    queue,
                    state.value,
                    nj.priority,
                    nj.max_attempts,
                    nj.timeout,
                    ttl,
                    run_at,
                    now,
                    expires_at,
                    key,
                    nj.tenant,
                    nj.retry_of,
                    bytearray(nj.payload),  # see _insert_plain
                    None if nj.metadata is None else bytearray(nj.metadata),
                )
            )
        problem: str | None = None
        metadata: dict[str, Any] = {}
        if nj.metadata is None:
            try:
                payload = loads(nj.payload)
            except ValueError:
                payload, metadata, problem = _decode_new(nj)
        else:
            payload, metadata, problem = _decode_new(nj)
        # Positional, in decode.JOB_FIELDS order (checked at import).
        job = Job(
            nj.id,
            nj.task,
            queue,
            payload,
            state,
            nj.priority,
            0,  # attempts
            nj.max_attempts,
            nj.timeout,
            run_at,
            now,  # created_at
            None,  # started_at
            None,  # finished_at
            expires_at,
            ttl,
            None,  # lease_until
            None,  # lease_token
            None,  # worker_id
            0,  # stalls
            None,  # progress
            None,  # result
            None,  # error
            [],  # errors
            None,  # failure_reason
            key,
            nj.tenant,
            metadata,
            None,  # retried_as
            nj.retry_of,
            False,  # cancel_requested
            False,  # duplicate
            problem,  # decode_error
        )
        if key is not None:
            known[key] = job  # a second job with this key in the batch is its duplicate
            key_rows.append((key, nj.id, nj.task, queue, now + nj.idempotency_ttl))
        added[queue] = added.get(queue, 0) + 1
        results.append(job)

    for queue, count in added.items():
        max_size = configs.get(queue, _NO_CONFIG)[0]
        if max_size is not None:
            (pending,) = conn.execute(Q.count_pending, {"queue": queue}).fetchone()
            if pending + count > max_size:
                raise QueueFull(queue, max_size)  # rolls the whole batch back
    if runs:
        _insert_plain(conn, runs, now)
    if rows:
        conn.executemany(Q.insert_job, rows)
    if key_rows:
        conn.executemany(Q.upsert_key, key_rows)
    return results


#: Plain jobs sharing everything but id and payload go in one statement when
#: there are at least this many of them.
RUN_MIN = 8


def _insert_plain(
    conn: sqlite3.Connection, runs: dict[tuple[Any, ...], list[NewJob]], now: float
) -> None:
    """Insert plain jobs (no options set), grouped by what they share.

    Binding parameters costs Python's sqlite3 more than SQLite's insert: an exact
    int, float, str or bytearray is cheap, but every None and bytes goes through
    an adapter lookup. So a run of jobs sharing task, queue, state, priority,
    max_attempts and run_at is inserted by ONE statement that reads only
    ``[id, payload]`` per job from a JSON array (``insert_job_run``); the rest,
    and payloads that cannot travel as JSON text (big, not UTF-8, or with a NUL
    byte), go through ``executemany`` with 9 parameters, the payload bound as a
    bytearray (a BLOB, like bytes, without the adapter lookup).
    """
    single: list[tuple[Any, ...]] = []
    for (task, queue, state, priority, max_attempts, run_at), members in runs.items():
        items: list[list[str]] = []
        for nj in members:
            payload = nj.payload
            if len(members) >= RUN_MIN and len(payload) <= INLINE_MAX and b"\0" not in payload:
                try:
                    items.append([nj.id, payload.decode()])
                    continue
                except UnicodeDecodeError:
                    pass
            single.append(
                (nj.id, task, queue, state, priority, max_attempts, run_at, now, bytearray(payload))
            )
        if items:
            params = {
                "task": task,
                "queue": queue,
                "state": state,
                "priority": priority,
                "max_attempts": max_attempts,
                "run_at": run_at,
                "now": now,
                "items": _json(items),
            }
            conn.execute(Q.insert_job_run, params)
    if single:
        conn.executemany(Q.insert_plain_job, single)


def _decode_new(nj: NewJob) -> tuple[Any, dict[str, Any], str | None]:
    """The payload and metadata of a new job as values, through the shared
    decoder, which names any problem (the loop above decodes the plain
    payload-only case itself)."""
    fields = decode_fields(nj.payload, nj.metadata)
    return fields.payload, fields.metadata, fields.problem


def _live_keys(conn: sqlite3.Connection, jobs: Sequence[NewJob], now: float) -> dict[str, Job]:
    """key -> the job a live idempotency key points at (rebuilt from the key row
    with its final state when retention already deleted the job)."""
    keys = list(dict.fromkeys(j.idempotency_key for j in jobs if j.idempotency_key is not None))
    live = conn.execute(Q.live_keys, {"keys": _json(keys), "now": now}).fetchall()
    if not live:
        return {}
    ids = [row[1] for row in live]
    by_id = {
        row[0]: job_from_row(row)
        for row in conn.execute(Q.jobs_by_ids, {"ids": _json(ids)}).fetchall()
    }
    found: dict[str, Job] = {}
    for key, job_id, task, queue, final_state in live:
        job = by_id.get(job_id)
        if job is None:
            state = _STATES.get(final_state) if final_state is not None else None
            if state is None:
                continue  # the row vanished without a trace: the key no longer holds
            job = Job(id=job_id, task=task, queue=queue, state=state, idempotency_key=key)
        found[key] = job
    return found


# -- claim ---------------------------------------------------------------------


def claim(conn: sqlite3.Connection, request: ClaimRequest) -> ClaimResult:
    """Promote due delayed jobs, expire TTL'd waiting ones, then claim (one transaction)."""
    now = time.time()
    conn.execute(Q.promote_due, {"now": now})
    expired = [job_from_row(r) for r in conn.execute(Q.expire_due, {"now": now}).fetchall()]
    queues = list(dict.fromkeys(request.queues))
    limit = request.limit
    if limit <= 0 or not queues:
        return ClaimResult([], expired)

    # Per-task limits for this claim. A task with nothing left is simply
    # excluded; only a cap below the batch size can bind and needs the slow path.
    excluded: set[str] = set()
    caps: dict[str, int] = {}

    def cap(task: str, allowed: int) -> None:
        if allowed <= 0:
            excluded.add(task)
        elif allowed < limit:
            caps[task] = min(caps.get(task, allowed), allowed)

    for task, free in request.task_limits.items():
        cap(task, free)
    trials: list[str] = []
    if request.circuit_tasks:
        for task, open_until in conn.execute(Q.open_circuits).fetchall():
            if open_until is None or open_until <= now:
                trials.append(task)  # its open period has passed: one trial job
                cap(task, 1)
            else:
                excluded.add(task)
    for task, rate in request.rate_limits.items():
        since = now - rate.period
        conn.execute(Q.rate_trim, {"task": task, "since": since})
        (used,) = conn.execute(Q.rate_used, {"task": task, "since": since}).fetchone()
        cap(task, rate.limit - int(used))

    params: dict[str, Any] = {
        "now": now,
        "lease_until": now + request.lease,
        "token": new_token(),
        "worker_id": request.worker_id,
        "queues": _json(queues),
        "limit": limit,
        "blocked": _json(sorted(excluded)),
    }
    if caps:
        rows = _claim_capped(conn, params, caps, excluded)
    else:
        rows = conn.execute(Q.claim_fast, params).fetchall()

    if rows and (request.rate_limits or trials):
        started: dict[str, int] = {}
        for row in rows:
            started[row[1]] = started.get(row[1], 0) + 1
        starts = [
            (task, now, started[task], rate.period)
            for task, rate in request.rate_limits.items()
            if task in started
        ]
        if starts:  # the sliding log, cluster-wide
            conn.executemany(Q.rate_record, starts)
        half_open = [(now, task) for task in trials if task in started]
        if half_open:
            conn.executemany(Q.circuit_trial, half_open)
    rows.sort(key=claim_order)  # RETURNING has no order
    return ClaimResult([job_from_row(r) for r in rows], expired)


def _claim_capped(
    conn: sqlite3.Connection,
    params: dict[str, Any],
    caps: dict[str, int],
    excluded: set[str],
) -> list[Row]:
    """The slow path, for caps below the batch size.

    Candidates come in claim order; a task that reaches its cap is excluded and
    the query re-run, so a capped task at the head of the queue cannot starve
    the others behind it.
    """
    excluded = set(excluded)
    taken: dict[str, int] = {}
    rows: list[Row] = []
    remaining = int(params["limit"])
    while remaining > 0:
        params["excluded"] = _json(sorted(excluded))
        params["limit"] = remaining
        candidates = conn.execute(Q.claim_candidates, params).fetchall()
        chosen: list[str] = []
        skipped = False
        for job_id, task in candidates:
            limit = caps.get(task)
            count = taken.get(task, 0)
            if limit is not None and count >= limit:
                skipped = True
                continue
            chosen.append(job_id)
            taken[task] = count + 1
            if limit is not None and count + 1 >= limit:
                excluded.add(task)
        if chosen:
            params["ids"] = _json(chosen)
            claimed = conn.execute(Q.claim_ids, params).fetchall()
            rows.extend(claimed)
            remaining -= len(claimed)
        if not skipped or len(candidates) < params["limit"]:
            break  # every candidate was taken, or there are no more
    return rows


# -- renew, progress, settle ---------------------------------------------------


def _leases(conn: sqlite3.Connection, ids: list[str]) -> dict[str, Row]:
    """id -> (id, lease_token, cancel_requested, queue) of the active ones."""
    return {r[0]: r for r in conn.execute(Q.leases_of, {"ids": _json(ids)}).fetchall()}


def renew(conn: sqlite3.Connection, leases: Sequence[tuple[str, str]], lease: float) -> RenewResult:
    now = time.time()
    current = _leases(conn, [job_id for job_id, _ in leases])
    result = RenewResult()
    params: list[tuple[Any, ...]] = []
    for job_id, token in leases:
        row = current.get(job_id)
        if row is None or row[1] != token:
            result.lost.add(job_id)
            continue
        result.renewed.add(job_id)
        if row[2]:
            result.cancel_requested.add(job_id)
        params.append((now + lease, job_id, token))
    if params:
        conn.executemany(Q.renew_lease, params)
    return result


def save_progress(conn: sqlite3.Connection, items: Sequence[tuple[str, str, bytes]]) -> set[str]:
    current = _leases(conn, [job_id for job_id, _, _ in items])
    refused: set[str] = set()
    params: list[tuple[Any, ...]] = []
    for job_id, token, progress in items:
        row = current.get(job_id)
        if row is None or row[1] != token:
            refused.add(job_id)
            continue
        params.append((progress, job_id, token))
    if params:
        conn.executemany(Q.save_progress, params)
    return refused


#: A result or progress bigger than this takes the exact path rather than
#: being copied into the batch's JSON parameter.
INLINE_MAX = 64 * 1024

# (refused, cancelled, wake, counted): what applying a batch of settlements found.
_Applied = tuple[set[str], set[str], set[str], list[Settlement]]


def settle(
    conn: sqlite3.Connection, settlements: Sequence[Settlement]
) -> tuple[SettleResult, set[str]]:
    """Apply outcomes fenced by lease token; returns the result and the queues
    that got a job back (released or retried) to wake waiters on.

    COMPLETE outcomes (nearly all of them) take one statement for the batch;
    anything else, a repeated id, or a refusal takes the exact path, which
    reads each lease first. A RETRY or RELEASE of a job with a pending cancel
    request ends it cancelled instead: ``leases_of`` reads the flag in this
    transaction.
    """
    now = time.time()
    applied = _settle_fast(conn, settlements, now)
    if applied is None:
        applied = _settle_exact(conn, settlements, now)
    refused, cancelled, wake, counted = applied
    changes = _count_in_circuits(conn, counted, now) if counted else []
    return SettleResult(refused=refused, circuit_changes=changes, cancelled=cancelled), wake


def _settle_fast(
    conn: sqlite3.Connection, settlements: Sequence[Settlement], now: float
) -> _Applied | None:
    """Every COMPLETE of the batch in one UPDATE, checked by its change count;
    ``None`` (nothing changed) when the exact path must decide."""
    items: list[list[str | None]] = []
    rest: list[Settlement] = []
    for s in settlements:
        if s.outcome is not Outcome.COMPLETE:
            rest.append(s)
            continue
        result, progress = s.result, s.progress
        if (result is not None and len(result) > INLINE_MAX) or (
            progress is not None and len(progress) > INLINE_MAX
        ):
            return None
        try:
            items.append(
                [
                    s.job_id,
                    s.lease_token,
                    None if result is None else result.decode(),
                    None if progress is None else progress.decode(),
                ]
            )
        except UnicodeDecodeError:
            return None
    if not items or len({s.job_id for s in settlements}) != len(settlements):
        return None  # a repeated id: only the exact path knows which one wins
    conn.execute("SAVEPOINT settle")
    changed = conn.execute(Q.complete_jobs, {"items": _json(items), "now": now}).rowcount
    if changed != len(items):  # some were refused: find out which, exactly
        conn.execute("ROLLBACK TO settle")
        conn.execute("RELEASE settle")
        return None
    conn.execute("RELEASE settle")
    if not rest:
        return set(), set(), set(), [s for s in settlements if s.circuit is not None]
    refused, cancelled, wake, _ = _settle_exact(conn, rest, now)
    counted = [
        s
        for s in settlements
        if s.circuit is not None and (s.outcome is Outcome.COMPLETE or s.job_id not in refused)
    ]
    return refused, cancelled, wake, counted


def _settle_exact(
    conn: sqlite3.Connection, settlements: Sequence[Settlement], now: float
) -> _Applied:
    """Read each job's lease, then apply the outcomes that hold it (``executemany``)."""
    current = _leases(conn, [s.job_id for s in settlements])
    refused: set[str] = set()
    cancelled: set[str] = set()
    wake: set[str] = set()
    params: list[tuple[Any, ...]] = []
    counted: list[Settlement] = []
    for s in settlements:
        row = current.get(s.job_id)
        if row is None or row[1] != s.lease_token:
            refused.add(s.job_id)
            continue
        del current[s.job_id]  # settled once: a second settlement in the batch is refused
        outcome = s.outcome
        if outcome is Outcome.RELEASE or outcome is Outcome.RETRY:
            if row[2]:  # a pending cancel wins over waiting again
                outcome = Outcome.CANCEL
                cancelled.add(s.job_id)
            else:
                wake.add(row[3])
        params.append(_settle_params(s, outcome, now))
        if s.circuit is not None:
            counted.append(s)  # counted as reported, even when a cancel ended the job
    if params:
        conn.executemany(Q.settle_job, params)
    return refused, cancelled, wake, counted


def _settle_params(s: Settlement, outcome: Outcome, now: float) -> tuple[Any, ...]:
    """The 12 parameters of ``settle_job`` for one settlement ending in ``outcome``."""
    error: str | None = None
    if s.error is not None and outcome is not Outcome.COMPLETE:
        info = s.error.to_dict()
        if not info["at"]:
            info["at"] = now
        error = dumps_str(info)
    tail = (s.progress, s.job_id, s.lease_token)
    if outcome is Outcome.COMPLETE:
        return ("completed", s.result, None, None, None, 0, now, 0, *tail, None)
    if outcome is Outcome.RETRY:
        run_at = now + s.retry_delay  # the next wait starts when the backoff ends
        return ("delayed", None, None, error, run_at, 0, None, 1, *tail, run_at)
    if outcome is Outcome.FAIL:
        reason = (s.failure_reason or FailureReason.ERROR).value
        return ("failed", None, reason, error, None, 0, now, 0, *tail, None)
    if outcome is Outcome.CANCEL:
        return ("cancelled", None, None, error, None, 0, now, 0, *tail, None)
    if outcome is Outcome.RELEASE:
        return ("waiting", None, None, error, None, 1, None, 1, *tail, now)
    raise ValueError(f"unknown outcome {outcome!r}")


def _count_in_circuits(
    conn: sqlite3.Connection, counted: list[Settlement], now: float
) -> list[CircuitInfo]:
    """Count successes and failures in their tasks' circuits, in batch order."""
    tasks = list(dict.fromkeys([s.task for s in counted]))
    # task -> [state, failures, open_for, open_until]; no row = closed, 0 failures
    circuits: dict[str, list[Any]] = {
        task: [state, failures, open_for, open_until]
        for task, state, failures, open_for, open_until in conn.execute(
            Q.circuits_of, {"tasks": _json(tasks)}
        ).fetchall()
    }
    if all(c[0] == _CLOSED and not c[1] for c in circuits.values()) and all(
        s.outcome is Outcome.COMPLETE for s in counted
    ):
        return []  # successes on closed circuits without failures change nothing
    dirty: set[str] = set()
    changes: list[CircuitInfo] = []
    for s in counted:
        policy = s.circuit
        assert policy is not None
        c = circuits.setdefault(s.task, [_CLOSED, 0, None, None])
        if s.outcome is Outcome.COMPLETE:
            if c[0] != _CLOSED:
                c[0], c[1], c[3] = _CLOSED, 0, None
                changes.append(CircuitInfo(s.task, CircuitState.CLOSED, 0, None))
                dirty.add(s.task)
            elif c[1]:
                c[1] = 0
                dirty.add(s.task)
        elif s.outcome is Outcome.RETRY or s.outcome is Outcome.FAIL:
            c[1] += 1
            c[2] = policy.open_for
            dirty.add(s.task)
            opens = c[0] == _HALF_OPEN or (
                c[0] == _CLOSED and policy.threshold > 0 and c[1] >= policy.threshold
            )
            if opens:
                c[0], c[3] = _OPEN, now + policy.open_for
                changes.append(CircuitInfo(s.task, CircuitState.OPEN, c[1], c[3]))
    if dirty:
        conn.executemany(Q.upsert_circuit, [(task, *circuits[task]) for task in sorted(dirty)])
    return changes

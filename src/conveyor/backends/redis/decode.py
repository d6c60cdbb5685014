"""Stored job hashes -> :class:`Job`, and the other records scripts return.

A job hash uses short field names to keep small jobs small in memory:

====  =================  ====  ==================
t     task               lu    lease_until
q     queue              lt    lease_token
(p)   payload: its own   w     worker_id
s     state              st    stalls
pr    priority (0: absent)  pg  progress (JSON)
a     attempts           r     result (JSON)
ma    max_attempts       e     errors (JSON list)
to    timeout            fr    failure_reason
ra    run_at             ik    idempotency_key
ca    created_at         tn    tenant
ttl   effective TTL      m     metadata (JSON)
ex    expires_at         ro    retry_of
sa    started_at         rs    retried_as
fa    finished_at        cr    cancel requested ("1")
====  =================  ====  ==================

The payload is a string key of its own (``keys.payload``); scripts return it
with the hash as field ``p``, and the id as field ``id``. Absent fields are
``None`` (or 0). A column that does not decode sets
``decode_error`` (see ``backends/rows.py``); reading never raises on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor import serialization
from conveyor.backends.base import CircuitInfo, CircuitState
from conveyor.backends.rows import decode_fields
from conveyor.job import FailureReason, Job, JobState

Raw = Sequence[bytes]

_STATES = {state.value.encode(): state for state in JobState}
_REASONS = {reason.value.encode(): reason for reason in FailureReason}


def _text(value: bytes | None) -> str | None:
    return value.decode("utf-8", "replace") if value is not None else None


def _float(value: bytes | None) -> float | None:
    return float(value) if value is not None else None


def as_dict(raw: Raw) -> dict[bytes, bytes]:
    it = iter(raw)
    return dict(zip(it, it, strict=True))


def job_from_hash(raw: Raw, duplicate: bool = False) -> Job:
    """A :class:`Job` from a flat ``[field, value, ...]`` HGETALL reply."""
    f = as_dict(raw)
    get = f.get
    payload = get(b"p")
    metadata = get(b"m")
    result = get(b"r")
    progress = get(b"pg")
    errors = get(b"e")
    if metadata is None and result is None and progress is None and errors is None:
        # The hot path: a fresh job has only a payload to decode.
        try:
            decoded_payload = serialization.loads(payload) if payload is not None else None
            problem = None
        except ValueError as exc:
            decoded_payload, problem = None, f"stored payload is not valid JSON: {exc}"
        decoded_metadata: dict[str, Any] = {}
        decoded_result = decoded_progress = None
        error = None
        error_list = []
    else:
        fields = decode_fields(payload, metadata, result, progress, errors)
        decoded_payload, problem = fields.payload, fields.problem
        decoded_metadata = fields.metadata
        decoded_result, decoded_progress = fields.result, fields.progress
        error, error_list = fields.error, fields.errors
    reason = get(b"fr")
    return Job(
        id=_text(get(b"id")) or "",
        task=(get(b"t") or b"").decode(),
        queue=(get(b"q") or b"").decode(),
        payload=decoded_payload,
        state=_STATES[get(b"s") or b"waiting"],
        priority=int(get(b"pr") or 0),
        attempts=int(get(b"a") or 0),
        max_attempts=int(get(b"ma") or 0),
        timeout=_float(get(b"to")),
        run_at=float(get(b"ra") or 0.0),
        created_at=float(get(b"ca") or 0.0),
        started_at=_float(get(b"sa")),
        finished_at=_float(get(b"fa")),
        expires_at=_float(get(b"ex")),
        ttl=_float(get(b"ttl")),
        lease_until=_float(get(b"lu")),
        lease_token=_text(get(b"lt")),
        worker_id=_text(get(b"w")),
        stalls=int(get(b"st") or 0),
        progress=decoded_progress,
        result=decoded_result,
        error=error,
        errors=error_list,
        failure_reason=_REASONS.get(reason) if reason is not None else None,
        idempotency_key=_text(get(b"ik")),
        tenant=_text(get(b"tn")),
        metadata=decoded_metadata,
        retried_as=_text(get(b"rs")),
        retry_of=_text(get(b"ro")),
        cancel_requested=get(b"cr") == b"1",
        duplicate=duplicate,
        decode_error=problem,
    )


def jobs_from_hashes(raws: Sequence[Raw]) -> list[Job]:
    return [job_from_hash(raw) for raw in raws]


def circuit_from_hash(task: str, raw: Raw) -> CircuitInfo:
    f = as_dict(raw)
    return CircuitInfo(
        task=task,
        state=CircuitState((f.get(b"state") or b"closed").decode()),
        failures=int(f.get(b"failures") or 0),
        open_until=_float(f.get(b"open_until")),
    )


def text_list(raw: Sequence[bytes]) -> list[str]:
    return [item.decode() for item in raw]

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
dp    depends_on (JSON)  of    on_dependency_failure (absent: cancel)
wf    workflow_id        dn    has dependents ("1"; not a Job field)
ck    concurrency_key
rk    rate_limit_key
pd    unfinished dependencies of a blocked job (not a Job field)
====  =================  ====  ==================

The payload is a string key of its own (``keys.payload``); scripts return it
with the hash as field ``p``, and the id as field ``id``. Absent fields are
``None`` (or 0). A column that does not decode sets
``decode_error`` (see ``backends/rows.py``); reading never raises on it.

Claims (and handoffs) come as lease groups packed with MessagePack: the lease
fields every job of one claim shares (``lu``, ``lt``, ``w``, ``sa``) once, then
the rows without them (``lease_group`` in ``scripts/lib.lua``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from conveyor import serialization
from conveyor.backends.base import CircuitInfo, CircuitState, ClaimResult
from conveyor.backends.rows import decode_fields
from conveyor.job import DependencyPolicy, FailureReason, Job, JobState

Raw = Sequence[bytes]  # a missing payload key comes back as None

_STATES = {state.value.encode(): state for state in JobState}
_REASONS = {reason.value.encode(): reason for reason in FailureReason}


def _float(value: bytes | None) -> float | None:
    return float(value) if value is not None else None


def as_dict(raw: Raw) -> dict[bytes, bytes]:
    it = iter(raw)
    return dict(zip(it, it, strict=True))


def _text_of(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def _policy(value: bytes) -> DependencyPolicy:
    return DependencyPolicy.RUN if value == b"run" else DependencyPolicy.CANCEL


#: Stored field -> (Job attribute, how to read it), for the fields read as they
#: are; the JSON ones are in _ENCODED. Walking only the fields a hash holds
#: (about a dozen for a fresh job, of 30) is what keeps a claim's decoding cheap.
_PLAIN: dict[bytes, tuple[str, Callable[[bytes], Any]]] = {
    b"id": ("id", _text_of),
    b"t": ("task", bytes.decode),
    b"q": ("queue", bytes.decode),
    b"s": ("state", _STATES.__getitem__),
    b"pr": ("priority", int),
    b"a": ("attempts", int),
    b"ma": ("max_attempts", int),
    b"to": ("timeout", float),
    b"ra": ("run_at", float),
    b"ca": ("created_at", float),
    b"sa": ("started_at", float),
    b"fa": ("finished_at", float),
    b"ex": ("expires_at", float),
    b"ttl": ("ttl", float),
    b"lu": ("lease_until", float),
    b"lt": ("lease_token", _text_of),
    b"w": ("worker_id", _text_of),
    b"st": ("stalls", int),
    b"fr": ("failure_reason", _REASONS.get),
    b"ik": ("idempotency_key", _text_of),
    b"tn": ("tenant", _text_of),
    b"rs": ("retried_as", _text_of),
    b"ro": ("retry_of", _text_of),
    b"cr": ("cancel_requested", b"1".__eq__),
    b"of": ("on_dependency_failure", _policy),
    b"wf": ("workflow_id", _text_of),
    b"ck": ("concurrency_key", _text_of),
    b"rk": ("rate_limit_key", _text_of),
}
#: JSON list of ids, read like the payload: a bad value sets decode_error.
_DEPENDS = b"dp"
_ENCODED = {b"p": 0, b"m": 1, b"r": 2, b"pg": 3, b"e": 4}


def _unset(duplicate: bool = False) -> dict[str, Any]:
    """What a hash without the field decodes to, where Job's default differs
    (new mutable values for each job)."""
    return {
        "id": "",
        "task": "",
        "queue": "",
        "max_attempts": 0,
        "payload": None,
        "metadata": {},
        "errors": [],
        "duplicate": duplicate,
    }


def _read_payload(fields: dict[str, Any], payload: bytes) -> None:
    try:
        fields["payload"] = serialization.loads(payload)
    except ValueError as exc:
        fields["decode_error"] = f"stored payload is not valid JSON: {exc}"


def _read_depends(fields: dict[str, Any], raw: bytes) -> None:
    """``depends_on`` from its JSON list; after the other JSON fields, so the
    first problem found is the one reported."""
    try:
        ids = serialization.loads(raw)
    except ValueError as exc:
        problem: str | None = f"stored depends_on is not valid JSON: {exc}"
    else:
        if isinstance(ids, list) and all(isinstance(i, str) for i in ids):
            fields["depends_on"] = tuple(ids)
            return
        problem = "stored depends_on is not a list of ids"
    if fields.get("decode_error") is None:
        fields["decode_error"] = problem


def job_from_hash(raw: Raw, duplicate: bool = False) -> Job:
    """A :class:`Job` from a flat ``[field, value, ...]`` HGETALL reply."""
    fields = _unset(duplicate)
    encoded: list[bytes | None] = [None, None, None, None, None]
    depends = None
    it = iter(raw)
    for name, value in zip(it, it, strict=True):
        plain = _PLAIN.get(name)
        if plain is not None:
            fields[plain[0]] = plain[1](value)
        else:
            slot = _ENCODED.get(name)
            if slot is not None:
                encoded[slot] = value
            elif name == _DEPENDS:
                depends = value
    payload, metadata, result, progress, errors = encoded
    if metadata is None and result is None and progress is None and errors is None:
        # The hot path: a fresh job has only a payload to decode.
        if payload is not None:
            _read_payload(fields, payload)
    else:
        decoded = decode_fields(payload, metadata, result, progress, errors)
        fields.update(
            payload=decoded.payload,
            decode_error=decoded.problem,
            metadata=decoded.metadata,
            result=decoded.result,
            progress=decoded.progress,
            error=decoded.error,
            errors=decoded.errors,
        )
    if depends is not None:
        _read_depends(fields, depends)
    return Job(**fields)


#: Fields whose values differ from job to job: not worth remembering in a batch.
_UNIQUE = frozenset({b"id", b"ik", b"ro", b"rs"})

_Reader = tuple[int, str, Callable[[bytes], Any]]  # (value index, Job attribute, reader)


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where the fields of one hash layout sit in a reply. Rows of one claim
    mostly share one: a small hash keeps its fields in the order they were
    written, and the scripts append theirs in a fixed order."""

    shared: tuple[_Reader, ...]
    """Fields whose values rows of a batch mostly share (task, queue, times...)"""
    shared_values: Callable[[Raw], Any]
    """The row's values of those fields: rows with equal ones decode alike"""
    unique: tuple[_Reader, ...]
    payload: int | None
    depends: int | None


#: Layout per tuple of field names; None: JSON fields besides the payload
#: (a result, errors...), which job_from_hash reads. Claims see a handful;
#: the cache starts over when full.
_LAYOUTS: dict[tuple[bytes, ...], _Layout | None] = {}
_MAX_LAYOUTS = 256


def _layout(names: tuple[bytes, ...]) -> _Layout | None:
    shared: list[_Reader] = []
    unique: list[_Reader] = []
    payload = depends = None
    for index, name in enumerate(names):
        at = 2 * index + 1
        read = _PLAIN.get(name)
        if read is not None:
            (unique if name in _UNIQUE else shared).append((at, read[0], read[1]))
        elif name == b"p":
            payload = at
        elif name == _DEPENDS:
            depends = at
        elif name in _ENCODED:
            return None
    positions = [at for at, _, _ in shared]
    shared_values = operator.itemgetter(*positions) if positions else _nothing
    return _Layout(tuple(shared), shared_values, tuple(unique), payload, depends)


def _nothing(raw: Raw) -> None:
    return None


def jobs_from_hashes(raws: Sequence[Raw], lease: dict[str, Any] | None = None) -> list[Job]:
    """Like :func:`job_from_hash` for each row, in less time for a claim's rows:
    each layout is worked out once, and rows whose shared values (task, queue,
    times...) are equal start from one decoded template, so only their id and
    payload are read per row. ``lease``: Job attributes every row takes, over
    what the row holds."""
    out: list[Job] = []
    templates: dict[tuple[tuple[bytes, ...], Any], dict[str, Any]] = {}
    for raw in raws:
        names = tuple(raw[0::2])
        try:
            layout = _LAYOUTS[names]
        except KeyError:
            layout = _layout(names)
            if len(_LAYOUTS) >= _MAX_LAYOUTS:
                _LAYOUTS.clear()
            _LAYOUTS[names] = layout
        if layout is None or len(raw) % 2:
            job = job_from_hash(raw)  # which also refuses a row of odd length
            if lease:
                for attribute, value in lease.items():
                    setattr(job, attribute, value)
            out.append(job)
            continue
        key = (names, layout.shared_values(raw))
        template = templates.get(key)
        if template is None:
            template = _unset()
            for at, attribute, read in layout.shared:
                template[attribute] = read(raw[at])
            if lease:
                template.update(lease)
            templates[key] = template
        fields = template.copy()
        fields["metadata"] = {}  # each job its own mutable values
        fields["errors"] = []
        for at, attribute, read in layout.unique:
            fields[attribute] = read(raw[at])
        if layout.payload is not None:
            payload = raw[layout.payload]
            if payload is not None:  # None: the payload key is gone
                _read_payload(fields, payload)
        if layout.depends is not None:
            _read_depends(fields, raw[layout.depends])
        out.append(Job(**fields))
    return out


def leased_result(groups: Sequence[Sequence[Any]], expired: Sequence[Raw]) -> ClaimResult:
    """Jobs from lease groups ``[lease_until, lease_token, worker_id, started_at,
    rows]``, and expired rows: what a claim or a handoff holds."""
    jobs: list[Job] = []
    for lease_until, token, worker_id, started_at, rows in groups:
        lease = {
            "lease_until": float(lease_until),
            "lease_token": _text_of(token),
            "worker_id": _text_of(worker_id),
            "started_at": float(started_at),
        }
        jobs += jobs_from_hashes(rows, lease)
    return ClaimResult(jobs, jobs_from_hashes(expired))


def claim_result(packed: bytes) -> ClaimResult:
    """What the claim and handoff-end scripts return, packed with MessagePack."""
    groups, expired = msgpack.unpackb(packed, raw=True)
    return leased_result(groups, expired)


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

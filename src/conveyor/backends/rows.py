"""Decoding stored JSON columns into a :class:`Job` (and a heartbeat into a
:class:`WorkerInfo`), shared by every backend.

A column that does not decode never raises here: the job gets ``decode_error``
and the worker fails it as ``invalid`` while the rest of the batch runs.
"""

from __future__ import annotations

from typing import Any

from conveyor import serialization
from conveyor.backends.base import WorkerInfo
from conveyor.job import ErrorInfo


class DecodedFields:
    __slots__ = ("error", "errors", "metadata", "payload", "problem", "progress", "result")

    def __init__(self) -> None:
        self.payload: Any = None
        self.metadata: dict[str, Any] = {}
        self.result: Any = None
        self.progress: Any = None
        self.error: ErrorInfo | None = None
        self.errors: list[ErrorInfo] = []
        self.problem: str | None = None


def _load(raw: bytes | str | None, name: str, out: DecodedFields) -> Any:
    if raw is None:
        return None
    try:
        return serialization.loads(raw)
    except ValueError as exc:
        if out.problem is None:
            out.problem = f"stored {name} is not valid JSON: {exc}"
        return None


def decode_fields(
    payload: bytes | str | None,
    metadata: bytes | str | None = None,
    result: bytes | str | None = None,
    progress: bytes | str | None = None,
    errors: bytes | str | None = None,
) -> DecodedFields:
    out = DecodedFields()
    out.payload = _load(payload, "payload", out)
    meta = _load(metadata, "metadata", out)
    out.metadata = meta if isinstance(meta, dict) else {}
    out.result = _load(result, "result", out)
    out.progress = _load(progress, "progress", out)
    history = _load(errors, "errors", out)
    if isinstance(history, list) and history:
        out.errors = [ErrorInfo.from_dict(e) for e in history if isinstance(e, dict)]
        out.error = out.errors[-1]
    return out


def encode_errors(errors: list[ErrorInfo]) -> bytes:
    return serialization.dumps([e.to_dict() for e in errors])


def worker_blob(worker: WorkerInfo) -> bytes:
    """What a heartbeat stores as JSON: everything but the id, ``last_seen`` (the
    backend's clock stamps it) and ``heartbeat_interval`` (columns of their own)."""
    info = worker.to_dict()
    del info["id"], info["last_seen"], info["heartbeat_interval"]
    return serialization.dumps(info)


def worker_from_blob(
    worker_id: str,
    blob: bytes | str,
    last_seen: float,
    heartbeat_interval: float | None = None,
) -> WorkerInfo:
    """A stored heartbeat; a blob that does not decode gives empty fields rather
    than hiding the worker. ``heartbeat_interval=None``: read it from the blob."""
    try:
        data = serialization.loads(blob)
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    if heartbeat_interval is None:
        heartbeat_interval = float(data.get("heartbeat_interval", 10.0))
    return WorkerInfo(
        id=worker_id,
        host=str(data.get("host", "")),
        pid=int(data.get("pid", 0)),
        queues=[str(q) for q in data.get("queues", [])],
        concurrency=int(data.get("concurrency", 0)),
        active=int(data.get("active", 0)),
        started_at=float(data.get("started_at", 0.0)),
        last_seen=last_seen,
        heartbeat_interval=float(heartbeat_interval),
    )

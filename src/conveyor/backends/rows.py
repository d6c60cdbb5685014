"""Decoding stored JSON columns into a :class:`Job`, shared by every backend.

A column that does not decode never raises here: the job gets ``decode_error``
and the worker fails it as ``invalid`` while the rest of the batch runs.
"""

from __future__ import annotations

from typing import Any

from conveyor import serialization
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

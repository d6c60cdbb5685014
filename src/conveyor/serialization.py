"""JSON encoding for payloads, results and metadata (orjson; never pickle)."""

from __future__ import annotations

from typing import Any

import orjson

from conveyor.errors import PayloadTooLarge, SerializationError

_OPTIONS = orjson.OPT_NON_STR_KEYS


def dumps(value: Any) -> bytes:
    """Encode ``value`` as JSON bytes, or raise :class:`SerializationError`."""
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except TypeError as exc:
        raise SerializationError(f"value is not JSON-serialisable: {exc}") from exc


def dumps_str(value: Any) -> str:
    return dumps(value).decode()


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Decode JSON; raises :class:`orjson.JSONDecodeError` (a ``ValueError``) on bad data."""
    return orjson.loads(data)


def encode_payload(payload: Any, limit: int) -> bytes:
    """Encode a payload and enforce ``max_payload_bytes``."""
    data = dumps(payload)
    if len(data) > limit:
        raise PayloadTooLarge(len(data), limit)
    return data

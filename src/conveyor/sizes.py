"""Byte sizes as users write them: ``536870912``, ``"512MB"``, ``"512MiB"``, ``"1.5GB"``.

kB, MB, GB and TB are powers of 1000; KiB, MiB, GiB and TiB powers of 1024;
a bare number (or ``B``) is bytes. Units are case-insensitive.
"""

from __future__ import annotations

import re

_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]+)?\s*$")


def parse_size(value: int | float | str) -> int:
    """Bytes in ``value``; raises ``ValueError`` naming what was wrong."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int | float):
        size = float(value)
    elif isinstance(value, str):
        match = _PATTERN.match(value.lower())
        unit = (match.group(2) or "b") if match else ""
        if not match or unit not in _UNITS:
            raise ValueError(
                f"not a size: {value!r} (use bytes or a string like '512MB', '512MiB', '2GB')"
            )
        size = float(match.group(1)) * _UNITS[unit]
    else:
        raise ValueError(f"not a size: {value!r}")
    if size < 1:
        raise ValueError(f"a size must be at least one byte: {value!r}")
    return int(size)


def format_size(size: int) -> str:
    """A short human form in powers of 1024: ``512.0MiB``, ``1.5GiB``, ``900B``."""
    amount = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if amount < 1024:
            return f"{amount:.0f}{unit}" if unit == "B" else f"{amount:.1f}{unit}"
        amount /= 1024
    return f"{amount:.1f}TiB"

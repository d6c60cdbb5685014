"""Durations as users write them: ``1.5``, ``"250ms"``, ``"30s"``, ``"5m"``, ``"1h"``, ``"1d"``."""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d|w)?\s*$")


def parse_duration(value: float | int | str | timedelta) -> float:
    """Seconds in ``value``; raises ``ValueError`` naming what was wrong."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an integer past the float range
            raise ValueError(f"not a duration: {value!r} is out of range") from None
    elif isinstance(value, str):
        match = _PATTERN.match(value.lower())
        if not match:
            raise ValueError(
                f"not a duration: {value!r} "
                "(use seconds or a string like '250ms', '30s', '5m', '1h')"
            )
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    else:
        raise ValueError(f"not a duration: {value!r}")
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative: {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """A short human form: ``850ms``, ``12.3s``, ``4m05s``, ``2h10m``, ``3d4h``."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h"

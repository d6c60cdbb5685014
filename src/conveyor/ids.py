"""Job and token ids: time-ordered, so ids sort roughly by creation."""

from __future__ import annotations

import os
import time


def new_id() -> str:
    """26 hex digits: 48 bits of milliseconds, then 56 random bits."""
    return f"{time.time_ns() // 1_000_000:012x}{os.urandom(7).hex()}"


def new_token() -> str:
    """A lease token: unguessable, unique per claim."""
    return os.urandom(8).hex()

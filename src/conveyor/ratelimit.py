"""Rate limit strings: ``"100/s"``, ``"10/2s"``, ``"500/m"``, ``"1000/h"``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from conveyor.durations import parse_duration

_PATTERN = re.compile(r"^\s*(\d+)\s*/\s*(\d*(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``limit`` starts in any sliding window of ``period`` seconds."""

    limit: int
    period: float

    @classmethod
    def parse(cls, text: str) -> RateLimit:
        match = _PATTERN.match(text.lower())
        if not match:
            raise ValueError(
                f"not a rate limit: {text!r} (use 'N/period', like '100/s' or '10/2s')"
            )
        limit = int(match.group(1))
        period = parse_duration(f"{match.group(2) or '1'}{match.group(3)}")
        if limit <= 0 or period <= 0:
            raise ValueError(f"a rate limit needs a positive count and period: {text!r}")
        return cls(limit, period)

    def __str__(self) -> str:
        return f"{self.limit}/{self.period:g}s"

"""Backoff policies: how long a failed attempt waits before the next one."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class Backoff:
    """``exponential``: ``min(max, base * multiplier**(n-1))``; ``fixed``: ``base``.

    ``jitter`` (0..1) spreads each delay over ``[d*(1-jitter), d]`` so that a
    burst of failures does not retry in lockstep.
    """

    kind: Literal["exponential", "fixed"] = "exponential"
    base: float = 1.0
    max: float = 3600.0
    multiplier: float = 2.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if self.base < 0 or self.max < 0:
            raise ValueError("backoff base and max must be >= 0")
        if self.multiplier < 1:
            raise ValueError("backoff multiplier must be >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("backoff jitter must be within 0..1")

    @classmethod
    def exponential(
        cls, base: float = 1.0, max: float = 3600.0, multiplier: float = 2.0, jitter: float = 0.0
    ) -> Backoff:
        return cls("exponential", base, max, multiplier, jitter)

    @classmethod
    def fixed(cls, delay: float, jitter: float = 0.0) -> Backoff:
        return cls("fixed", delay, delay, 1.0, jitter)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if self.kind == "fixed":
            value = self.base
        else:
            exponent = max(attempt - 1, 0)
            # Cap the exponent so huge attempt counts cannot overflow a float.
            value = self.max if exponent > 1000 else self.base * self.multiplier**exponent
            value = min(self.max, value)
        if self.jitter:
            value *= 1 - (rng or random).random() * self.jitter
        return value

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "base": self.base,
            "max": self.max,
            "multiplier": self.multiplier,
            "jitter": self.jitter,
        }

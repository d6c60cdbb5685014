"""Reading a Prometheus text scrape in tests."""

from __future__ import annotations

import re


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample (labels in any order), or None."""
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match is None:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if found == labels:
            return float(match.group(2))
    return None

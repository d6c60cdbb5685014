"""examples/trace_console.py, whose output docs/how-to/stack.md shows: one trace
from the request through both attempts, the retry linked to the failed attempt."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_trace_example_prints_one_trace_with_a_linked_retry() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "trace_console.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    spans = re.findall(
        r"^(\S+(?: \S+)?) +(\w+) +trace (\w+)\n"
        r" +span (\w+) parent (\S+) status (\w+)(?: links (.*))?$",
        done.stdout,
        re.M,
    )
    by_name = {
        (name, status): (trace, span, parent, links)
        for name, _, trace, span, parent, status, links in spans
    }
    assert len(spans) == 4, done.stdout
    assert len({span[2] for span in spans}) == 1  # one trace id
    request = by_name[("POST /orders", "UNSET")]
    producer = by_name[("send email.send", "UNSET")]
    failed = by_name[("process email.send", "ERROR")]
    retried = by_name[("process email.send", "UNSET")]
    assert producer[2] == request[1]
    assert failed[2] == producer[1]
    assert retried[2] == producer[1]
    assert retried[3] == f"{failed[1]} (previous_attempt)"

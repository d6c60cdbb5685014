"""Draw the spans that examples/trace_two_processes.py prints as a waterfall (SVG).

    python examples/trace_two_processes.py > trace.txt
    python scripts/trace_waterfall.py trace.txt docs/images/trace-two-processes.svg

Reads the SDK's console output (JSON objects, one per span, from both
processes), nests each span under its parent and draws one bar per span on one
time axis: the gap between the PRODUCER and the CONSUMER bar is the time the job
waited (here, mostly the worker process starting).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any

WIDTH = 960
LABELS = 400
ROW = 30
TOP = 56
COLOURS = {"shop-web": "#3b82f6", "shop-worker": "#f59e0b"}


@dataclass
class Span:
    name: str
    kind: str
    service: str
    trace_id: str
    span_id: str
    parent_id: str | None
    start: float
    end: float
    depth: int = 0


def spans_of(text: str) -> list[Span]:
    """Every JSON object in ``text`` that is a span (the log lines are not)."""
    decoder = json.JSONDecoder()
    found, at = [], 0
    while (start := text.find("{", at)) != -1:
        row, at = decoder.raw_decode(text, start)
        if "context" in row:
            found.append(_span(row))
    by_id = {span.span_id: span for span in found}
    for span in found:
        parent = by_id.get(span.parent_id or "")
        while parent is not None:
            span.depth += 1
            parent = by_id.get(parent.parent_id or "")
    return sorted(found, key=lambda span: span.start)


def _span(row: dict[str, Any]) -> Span:
    return Span(
        name=row["name"],
        kind=row["kind"].removeprefix("SpanKind."),
        service=row["resource"]["attributes"].get("service.name", "?"),
        trace_id=row["context"]["trace_id"].removeprefix("0x"),
        span_id=row["context"]["span_id"].removeprefix("0x"),
        parent_id=(row["parent_id"] or "").removeprefix("0x") or None,
        start=datetime.fromisoformat(row["start_time"]).timestamp(),
        end=datetime.fromisoformat(row["end_time"]).timestamp(),
    )


def waterfall(spans: list[Span]) -> str:
    first = min(span.start for span in spans)
    total = max(span.end for span in spans) - first
    scale = (WIDTH - LABELS - 90) / total

    def x(at: float) -> float:
        return LABELS + (at - first) * scale

    traces = sorted({span.trace_id for span in spans})
    height = TOP + ROW * len(spans) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'font-family="ui-monospace, Menlo, Consolas, monospace" font-size="13">',
        f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="12" y="22" font-size="14" font-weight="bold">trace {", ".join(traces)}</text>',
        f'<text x="12" y="42" fill="#555">{len(spans)} spans from '
        f"{len({span.service for span in spans})} processes, one time axis "
        f"({total * 1000:.0f} ms)</text>",
    ]
    for row, span in enumerate(spans):
        y = TOP + row * ROW
        colour = COLOURS.get(span.service, "#6b7280")
        label = f"{span.name} ({span.kind}, {span.service})"
        left = x(span.start)
        width = max(3.0, (span.end - span.start) * scale)
        out += [
            f'<text x="{12 + 18 * span.depth}" y="{y + 19}">{escape(label)}</text>',
            f'<rect x="{left:.1f}" y="{y + 6}" width="{width:.1f}" height="18" rx="3" '
            f'fill="{colour}"><title>span {span.span_id} parent {span.parent_id or "-"}'
            "</title></rect>",
            f'<text x="{left + width + 6:.1f}" y="{y + 19}" fill="#333">'
            f"{(span.end - span.start) * 1000:.1f} ms</text>",
        ]
    axis = TOP + ROW * len(spans) + 8
    out += [
        f'<line x1="{LABELS}" y1="{axis}" x2="{WIDTH - 90}" y2="{axis}" stroke="#999"/>',
        f'<text x="{LABELS}" y="{axis + 18}" fill="#555">0 ms</text>',
        f'<text x="{WIDTH - 90}" y="{axis + 18}" fill="#555" text-anchor="end">'
        f"{total * 1000:.0f} ms</text>",
        "</svg>",
    ]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: trace_waterfall.py TRACE_OUTPUT SVG", file=sys.stderr)
        return 2
    spans = spans_of(Path(argv[0]).read_text())
    if not spans:
        print(f"{argv[0]}: no spans found", file=sys.stderr)
        return 1
    Path(argv[1]).write_text(waterfall(spans))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

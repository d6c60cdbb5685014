"""An app whose process exports its spans, one JSON object a line, to the file
named by ``TRACE_SPANS_FILE`` (the cross-process tracing tests read it)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from conveyor.app import Conveyor
from conveyor.context import JobContext
from conveyor.retry import Backoff


class FileExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as out:
            for span in spans:
                assert span.context is not None
                row = {
                    "name": span.name,
                    "kind": span.kind.name,
                    "trace_id": f"{span.context.trace_id:032x}",
                    "span_id": f"{span.context.span_id:016x}",
                    "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
                    "attributes": dict(span.attributes or {}),
                    "events": [event.name for event in span.events],
                    "pid": os.getpid(),
                }
                out.write(json.dumps(row) + "\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["TRACE_SPANS_FILE"])))
trace.set_tracer_provider(provider)

app = Conveyor(poll_interval=0.1, heartbeat_interval=0.5, shutdown_timeout=5, circuit_threshold=0)


@app.task("add")
async def add(ctx: JobContext, a: int, b: int) -> int:
    return a + b


@app.task("explode", attempts=1, backoff=Backoff.fixed(0.05))
async def explode(ctx: JobContext) -> None:
    raise RuntimeError("boom")

"""The benchmark app (conveyor_app) with OpenTelemetry set up as ``BENCH_TRACING`` says:

- ``absent``: ``opentelemetry`` cannot be imported, as if it were not installed;
- ``api`` (default): installed, no tracer provider set;
- ``sdk``: the SDK's tracer provider with a BatchSpanProcessor and an exporter
  that drops every span (the cost of making spans, not of shipping them);
- ``sdk-sampled``: the same, keeping 1% of traces (``ParentBased(TraceIdRatioBased(0.01))``).

    BENCH_TRACING=sdk python -m conveyor worker benchmarks.apps.traced_app:app

benchmarks/observability.py imports this module in its producer too, so the
enqueue side traces exactly when the worker does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

MODES = ("absent", "api", "sdk", "sdk-sampled")


def set_tracing(mode: str) -> None:
    if mode not in MODES:
        raise SystemExit(f"BENCH_TRACING={mode!r}: expected one of {', '.join(MODES)}")
    if mode == "absent":
        sys.modules["opentelemetry"] = None  # type: ignore[assignment]  # import fails
    elif mode in ("sdk", "sdk-sampled"):
        from opentelemetry import trace
        from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        class DropSpans(SpanExporter):
            def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
                return SpanExportResult.SUCCESS

            def shutdown(self, *args: Any) -> None:
                pass

        sampled = mode == "sdk-sampled"
        provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.01)) if sampled else None)
        provider.add_span_processor(BatchSpanProcessor(DropSpans()))
        trace.set_tracer_provider(provider)


set_tracing(os.environ.get("BENCH_TRACING", "api"))

from benchmarks.apps.conveyor_app import app  # noqa: E402  # after the tracing is set

__all__ = ["app"]

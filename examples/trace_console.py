"""What a traced job looks like: a web request enqueues a job whose first attempt
fails and whose retry completes; the OpenTelemetry SDK prints each span.

    pip install -e '.[otel]' opentelemetry-sdk
    python examples/trace_console.py

Shown in docs/how-to/stack.md ("A failed attempt and its retry").
"""

from __future__ import annotations

import asyncio

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from conveyor import Backoff, Conveyor, JobContext

SHOWN = ("conveyor.attempt", "conveyor.outcome", "messaging.destination.name")


def one_line(span: ReadableSpan) -> str:
    """Name, kind, trace, span, parent, links and a few attributes of ``span``."""
    context = span.get_span_context()
    assert context is not None
    parent = f"{span.parent.span_id:016x}" if span.parent else "-"
    links = [
        f"{link.context.span_id:016x} ({(link.attributes or {}).get('conveyor.link', 'producer')})"
        for link in span.links
    ]
    shown = {key: value for key, value in (span.attributes or {}).items() if key in SHOWN}
    return (
        f"{span.name:<18} {span.kind.name:<8} trace {context.trace_id:032x}\n"
        f"{'':18} span {context.span_id:016x} parent {parent} status {span.status.status_code.name}"
        f"{' links ' + ', '.join(links) if links else ''}\n{'':18} {shown}\n"
    )


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(formatter=one_line)))
trace.set_tracer_provider(provider)

app = Conveyor("memory://trace-console")
failures_left = 1


@app.task("email.send", attempts=2, backoff=Backoff.fixed(0.05), circuit_threshold=0)
async def send(ctx: JobContext, to: str) -> str:
    global failures_left
    if failures_left:
        failures_left -= 1
        raise ConnectionError("smtp timed out")
    return "sent"


async def main() -> None:
    with trace.get_tracer("shop").start_as_current_span("POST /orders", kind=trace.SpanKind.SERVER):
        await send.enqueue(to="ada@example.com")
    await app.drain()  # the first attempt fails: a retry 50 ms later
    await asyncio.sleep(0.1)
    await app.drain()  # the retry completes
    await app.close()


if __name__ == "__main__":
    asyncio.run(main())

"""A retry's CONSUMER span links to the span of the attempt before it, on every
store: the earlier attempt's context travels with its stored error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from worker_fixtures import Stack, running, settled

from conveyor.context import JobContext
from conveyor.job import JobState
from conveyor.retry import Backoff
from support.tracing import in_memory_spans


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with in_memory_spans() as exporter:
        yield exporter


def attempts(exporter: InMemorySpanExporter, job_id: str) -> list[ReadableSpan]:
    found = [
        span
        for span in exporter.get_finished_spans()
        if span.kind is SpanKind.CONSUMER
        and (span.attributes or {}).get("messaging.message.id") == job_id
    ]
    return sorted(found, key=lambda span: int((span.attributes or {})["conveyor.attempt"]))


@pytest.mark.parametrize("parent", ["parent", "link"])
async def test_each_retry_links_to_the_attempt_before_it(
    stack: Stack, spans: InMemorySpanExporter, parent: str
) -> None:
    app = stack.app(otel_parent=parent)

    @app.task("flaky", attempts=3, backoff=Backoff.fixed(0))
    async def flaky(ctx: JobContext) -> int:
        if ctx.job.attempts < 3:
            raise RuntimeError(f"attempt {ctx.job.attempts} fails")
        return ctx.job.attempts

    job = await app.enqueue("flaky")
    async with running(app):
        done = await settled(job)
    assert done.state is JobState.COMPLETED
    first, second, third = attempts(spans, job.id)
    assert first.context is not None
    assert second.context is not None
    assert done.errors[0].traceparent is not None
    assert done.errors[0].traceparent.split("-")[2] == f"{first.context.span_id:016x}"

    def previous(span: ReadableSpan) -> list[tuple[int, int]]:
        return [
            (link.context.trace_id, link.context.span_id)
            for link in span.links
            if (link.attributes or {}).get("conveyor.link") == "previous_attempt"
        ]

    assert previous(first) == []
    assert previous(second) == [(first.context.trace_id, first.context.span_id)]
    assert previous(third) == [(second.context.trace_id, second.context.span_id)]
    if parent == "link":  # the producer's link stays first
        assert len(second.links) == 2
        assert second.links[0].context.span_id != first.context.span_id

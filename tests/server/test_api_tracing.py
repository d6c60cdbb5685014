"""The HTTP API's enqueue paths with tracing on (the real SDK, in memory): each
job gets its PRODUCER span and stored trace context, and a caller's W3C
``traceparent`` header makes the job part of the caller's trace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from support.tracing import in_memory_spans

from .conftest import ADMIN, ENQUEUE, Serve, auth

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CALLER = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01", "tracestate": "shop=web"}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with in_memory_spans() as exporter:
        yield exporter


def producers(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {
        str((span.attributes or {})["messaging.message.id"]): span
        for span in exporter.get_finished_spans()
        if span.kind is SpanKind.PRODUCER
    }


async def test_post_jobs_stores_the_context_and_continues_the_callers_trace(
    serve: Serve, spans: InMemorySpanExporter
) -> None:
    app, client = await serve()
    plain = await client.post("/api/v1/jobs", json={"task": "add"}, headers=auth(ENQUEUE))
    called = await client.post(
        "/api/v1/jobs", json={"task": "add"}, headers={**auth(ENQUEUE), **CALLER}
    )
    assert (plain.status_code, called.status_code) == (201, 201)
    sent = producers(spans)
    for response in (plain, called):
        job_id = response.json()["id"]
        stored = await app.get_job(job_id)
        assert stored is not None
        context = sent[job_id].get_span_context()
        _, trace_id, span_id, _ = stored.metadata["traceparent"].split("-")
        assert (trace_id, span_id) == (f"{context.trace_id:032x}", f"{context.span_id:016x}")
    assert sent[plain.json()["id"]].parent is None  # no header: a trace of its own
    continued = sent[called.json()["id"]]
    assert continued.parent is not None
    assert f"{continued.parent.span_id:016x}" == CALLER_SPAN
    assert f"{continued.get_span_context().trace_id:032x}" == CALLER_TRACE
    stored = await app.get_job(called.json()["id"])
    assert stored is not None
    assert stored.metadata["tracestate"] == "shop=web"


async def test_a_span_already_current_wins_over_the_header(
    serve: Serve, spans: InMemorySpanExporter
) -> None:
    # An instrumented server makes its own span (from the same headers) current.
    _, client = await serve()
    with trace.get_tracer("asgi").start_as_current_span("POST /api/v1/jobs") as server_span:
        response = await client.post(
            "/api/v1/jobs", json={"task": "add"}, headers={**auth(ENQUEUE), **CALLER}
        )
    producer = producers(spans)[response.json()["id"]]
    assert producer.parent is not None
    assert producer.parent.span_id == server_span.get_span_context().span_id


async def test_a_malformed_traceparent_is_ignored(
    serve: Serve, spans: InMemorySpanExporter
) -> None:
    _, client = await serve()
    response = await client.post(
        "/api/v1/jobs",
        json={"task": "add"},
        headers={**auth(ENQUEUE), "traceparent": "00-nonsense\n-01"},
    )
    assert response.status_code == 201
    producer = producers(spans)[response.json()["id"]]
    assert producer.parent is None


async def test_post_workflows_gives_every_job_the_callers_trace(
    serve: Serve, spans: InMemorySpanExporter
) -> None:
    app, client = await serve()
    body = {"chain": [{"task": "add", "payload": {"a": 1, "b": 2}}, {"task": "mail.send"}]}
    created = await client.post("/api/v1/workflows", json=body, headers={**auth(ENQUEUE), **CALLER})
    assert created.status_code == 201, created.text
    sent = producers(spans)
    jobs = created.json()["jobs"]
    assert len(jobs) == 2
    for job in jobs:
        stored = await app.get_job(job["id"])
        assert stored is not None
        assert stored.metadata["traceparent"].split("-")[1] == CALLER_TRACE
        parent = sent[job["id"]].parent
        assert parent is not None
        assert f"{parent.span_id:016x}" == CALLER_SPAN


async def test_triggering_a_schedule_continues_the_callers_trace(
    serve: Serve, spans: InMemorySpanExporter
) -> None:
    app, client = await serve()
    app.schedule("nightly", cron="0 3 * * *", task="add", payload={"a": 1, "b": 2})
    await app.scheduler().sync()
    response = await client.post(
        "/api/v1/schedules/nightly/trigger", headers={**auth(ADMIN), **CALLER}
    )
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    stored = await app.get_job(job_id)
    assert stored is not None
    assert stored.metadata["schedule"] == "nightly"
    assert stored.metadata["traceparent"].split("-")[1] == CALLER_TRACE
    parent = producers(spans)[job_id].parent
    assert parent is not None
    assert f"{parent.span_id:016x}" == CALLER_SPAN

"""OpenTelemetry traces in one process, with the real SDK and an in-memory exporter."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from conveyor.app import Conveyor
from conveyor.context import JobContext
from conveyor.retry import Backoff
from conveyor.tracing import RESERVED_METADATA_KEYS, tracing_live
from conveyor.workflow import chain, group
from support.tracing import in_memory_spans, reset_global_provider


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with in_memory_spans() as exporter:
        yield exporter


def by_kind(exporter: InMemorySpanExporter, kind: SpanKind) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.kind is kind]


def make_app(**settings: Any) -> Conveyor:
    app = Conveyor("memory://", circuit_threshold=0, **settings)

    @app.task("add", queue="math")
    async def add(ctx: JobContext, a: int, b: int) -> int:
        with trace.get_tracer("handler").start_as_current_span("inside"):
            return a + b

    @app.task("boom", attempts=2, backoff=Backoff.fixed(0))
    async def boom(ctx: JobContext) -> None:
        raise RuntimeError("bad\nline")

    return app


def test_without_a_provider_tracing_is_off() -> None:
    reset_global_provider()
    assert not tracing_live()


async def test_no_provider_leaves_the_metadata_alone() -> None:
    reset_global_provider()
    app = make_app()
    job = await app.enqueue("add", {"a": 1, "b": 2})
    stored = await app.get_job(job.id)
    assert stored is not None
    assert stored.metadata == {}
    await app.close()


async def test_enqueue_span_is_the_parent_of_the_attempt_span(
    spans: InMemorySpanExporter,
) -> None:
    app = make_app()
    tracer = trace.get_tracer("web")
    with tracer.start_as_current_span("request") as request:
        job = await app.enqueue("add", {"a": 1, "b": 2}, tenant="acme", metadata={"k": "v"})
    stored = await app.get_job(job.id)
    assert stored is not None
    assert set(stored.metadata) == {"k", *RESERVED_METADATA_KEYS} - {"tracestate"}
    assert await app.drain() == 1
    await app.close()

    (producer,) = by_kind(spans, SpanKind.PRODUCER)
    assert producer.name == "send add"
    assert producer.parent is not None
    assert producer.parent.span_id == request.get_span_context().span_id
    assert producer.attributes is not None
    assert producer.attributes["messaging.system"] == "conveyor"
    assert producer.attributes["messaging.destination.name"] == "math"
    assert producer.attributes["messaging.message.id"] == job.id
    assert producer.context is not None
    trace_id = producer.context.trace_id
    assert stored.metadata["traceparent"].split("-")[1] == f"{trace_id:032x}"

    (consumer,) = by_kind(spans, SpanKind.CONSUMER)
    assert consumer.name == "process add"
    assert consumer.parent is not None
    assert consumer.parent.span_id == producer.context.span_id
    assert consumer.context is not None
    assert consumer.context.trace_id == trace_id
    attributes = dict(consumer.attributes or {})
    assert attributes["messaging.message.id"] == job.id
    assert attributes["messaging.destination.name"] == "math"
    assert attributes["conveyor.task"] == "add"
    assert attributes["conveyor.attempt"] == 1
    assert attributes["conveyor.tenant"] == "acme"
    assert attributes["conveyor.outcome"] == "complete"
    assert str(attributes["conveyor.worker.id"])
    # the handler's own span nests under the attempt
    (inside,) = [span for span in spans.get_finished_spans() if span.name == "inside"]
    assert inside.parent is not None
    assert inside.parent.span_id == consumer.context.span_id


async def test_link_mode_starts_a_new_trace_linked_to_the_producer(
    spans: InMemorySpanExporter,
) -> None:
    app = make_app(otel_parent="link")
    await app.enqueue("add", {"a": 1, "b": 2})
    await app.drain()
    await app.close()
    (producer,) = by_kind(spans, SpanKind.PRODUCER)
    (consumer,) = by_kind(spans, SpanKind.CONSUMER)
    assert producer.context is not None
    assert consumer.context is not None
    assert consumer.parent is None
    assert consumer.context.trace_id != producer.context.trace_id
    (link,) = consumer.links
    assert link.context.span_id == producer.context.span_id
    assert link.context.trace_id == producer.context.trace_id


async def test_a_failed_attempt_records_the_exception_and_each_attempt_has_a_span(
    spans: InMemorySpanExporter,
) -> None:
    app = make_app()
    job = await app.enqueue("boom")
    await app.drain()
    await app.close()
    attempts = sorted(
        by_kind(spans, SpanKind.CONSUMER), key=lambda s: (s.attributes or {})["conveyor.attempt"]
    )
    assert [(s.attributes or {})["conveyor.outcome"] for s in attempts] == ["retry", "fail"]
    for span in attempts:
        assert span.status.status_code is StatusCode.ERROR
        (event,) = [e for e in span.events if e.name == "exception"]
        assert event.attributes is not None
        assert event.attributes["exception.type"] == "RuntimeError"
        assert event.attributes["exception.message"] == "bad\nline"
        assert "Traceback" in str(event.attributes["exception.stacktrace"])
        assert (span.attributes or {})["messaging.message.id"] == job.id


async def test_enqueue_many_gives_each_job_its_own_producer_span(
    spans: InMemorySpanExporter,
) -> None:
    app = make_app()
    jobs = await app.enqueue_many([("add", {"a": n, "b": n}) for n in range(3)])
    await app.close()
    producers = by_kind(spans, SpanKind.PRODUCER)
    assert sorted((s.attributes or {})["messaging.message.id"] for s in producers) == sorted(
        job.id for job in jobs
    )


def test_enqueue_sync_carries_the_callers_current_span(spans: InMemorySpanExporter) -> None:
    app = make_app()
    seen: list[int] = []

    def call() -> None:
        with trace.get_tracer("web").start_as_current_span("sync request") as request:
            seen.append(request.get_span_context().span_id)
            app.enqueue_sync("add", {"a": 1, "b": 2})

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    asyncio.run(app.close())
    (producer,) = by_kind(spans, SpanKind.PRODUCER)
    assert producer.parent is not None
    assert producer.parent.span_id == seen[0]


async def test_each_job_of_a_batch_gets_its_own_consumer_span(
    spans: InMemorySpanExporter,
) -> None:
    app = Conveyor("memory://", circuit_threshold=0)

    @app.task("pair", batch_size=4, attempts=1)
    async def pair(ctx: Any, jobs: list[Any]) -> list[Any]:
        return [ValueError("odd") if job.payload["n"] % 2 else job.payload["n"] for job in jobs]

    tracer = trace.get_tracer("web")
    requests = {}
    for n in range(4):
        with tracer.start_as_current_span(f"request {n}") as request:
            job = await app.enqueue("pair", {"n": n})
        requests[job.id] = request.get_span_context()
    assert await app.drain() == 4
    await app.close()

    producers = {
        str((span.attributes or {})["messaging.message.id"]): span
        for span in by_kind(spans, SpanKind.PRODUCER)
    }
    consumers = by_kind(spans, SpanKind.CONSUMER)
    assert len(consumers) == 4
    outcomes = {}
    for consumer in consumers:
        attributes = dict(consumer.attributes or {})
        job_id = str(attributes["messaging.message.id"])
        producer = producers[job_id]
        assert consumer.name == "process pair"
        assert consumer.parent is not None
        assert producer.context is not None
        assert consumer.parent.span_id == producer.context.span_id  # its own, not a sibling's
        assert consumer.context is not None
        assert consumer.context.trace_id == requests[job_id].trace_id
        assert attributes["conveyor.batch.size"] == 4
        outcomes[job_id] = (attributes["conveyor.outcome"], consumer.status.status_code)
    assert sorted(outcomes.values()) == [
        ("complete", StatusCode.UNSET),
        ("complete", StatusCode.UNSET),
        ("fail", StatusCode.ERROR),
        ("fail", StatusCode.ERROR),
    ]


async def test_a_workflow_start_gives_every_job_a_producer_span_in_the_callers_trace(
    spans: InMemorySpanExporter,
) -> None:
    app = make_app()
    with trace.get_tracer("web").start_as_current_span("request") as request:
        workflow = await app.start(
            chain(app.step("add", {"a": 1, "b": 2}), group(app.step("add", {"a": 3, "b": 4})))
        )
    assert await app.drain() == 2
    await app.close()
    trace_id = request.get_span_context().trace_id
    producers = {
        (span.attributes or {})["messaging.message.id"]: span
        for span in by_kind(spans, SpanKind.PRODUCER)
    }
    assert set(producers) == {job.id for job in workflow.jobs}
    for span in producers.values():
        assert span.parent is not None
        assert span.parent.span_id == request.get_span_context().span_id
    consumers = by_kind(spans, SpanKind.CONSUMER)
    assert len(consumers) == 2
    for consumer in consumers:
        job_id = (consumer.attributes or {})["messaging.message.id"]
        producer_context = producers[job_id].get_span_context()
        assert consumer.parent is not None
        assert consumer.parent.span_id == producer_context.span_id
        assert consumer.get_span_context().trace_id == trace_id


async def test_schedule_fires_and_triggers_store_the_context(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}", circuit_threshold=0)

    @app.task("tick")
    async def tick(ctx: JobContext) -> None: ...

    app.schedule("every-second", cron="* * * * * *", task="tick")
    scheduler = app.scheduler()
    await scheduler.sync()
    backend = await app.connect()
    await backend.update_schedule(
        "every-second", next_fire_at=float(int(await backend.now()) - 1), reschedule=True
    )
    await scheduler.tick()
    triggered = await app.schedules.trigger("every-second")
    jobs = await app.list_jobs(limit=100)
    assert len(jobs) >= 2
    assert triggered.id in {job.id for job in jobs}
    assert await app.drain() == len(jobs)
    await app.close()

    producers = {
        (span.attributes or {})["messaging.message.id"]: span
        for span in by_kind(spans, SpanKind.PRODUCER)
    }
    consumers = {
        (span.attributes or {})["messaging.message.id"]: span
        for span in by_kind(spans, SpanKind.CONSUMER)
    }
    assert set(producers) == set(consumers) == {job.id for job in jobs}
    for job in jobs:
        assert job.metadata["schedule"] == "every-second"
        producer_context = producers[job.id].get_span_context()
        assert job.metadata["traceparent"].split("-")[1:3] == [
            f"{producer_context.trace_id:032x}",
            f"{producer_context.span_id:016x}",
        ]
        consumer = consumers[job.id]
        assert consumer.parent is not None
        assert consumer.parent.span_id == producer_context.span_id


async def test_a_retried_dead_letter_joins_the_original_trace(
    spans: InMemorySpanExporter,
) -> None:
    app = make_app()
    original = await app.enqueue("boom", attempts=1)
    await app.drain()
    copy = await app.dlq.retry(original.id)
    await app.drain()
    await app.close()
    (producer,) = by_kind(spans, SpanKind.PRODUCER)  # the retry itself makes none
    producer_context = producer.get_span_context()
    attempts = {
        (span.attributes or {})["messaging.message.id"]: span
        for span in by_kind(spans, SpanKind.CONSUMER)
    }
    assert set(attempts) == {original.id, copy.id}
    for span in attempts.values():
        assert span.parent is not None
        assert span.parent.span_id == producer_context.span_id
        assert span.get_span_context().trace_id == producer_context.trace_id

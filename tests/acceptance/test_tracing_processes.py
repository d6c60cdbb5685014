"""Traces across real processes: this test process enqueues under its own SDK;
a ``conveyor worker`` subprocess exports its spans to a file. The job's trace
id is the same in both, on every store that outlives a process."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from conveyor.app import Conveyor
from support.kits import KITS, UrlKit
from support.tracing import in_memory_spans

from .conftest import Cli, clean_env, wait_until

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent


@pytest.fixture
def producer_spans() -> Iterator[InMemorySpanExporter]:
    with in_memory_spans() as exporter:
        yield exporter


@pytest.fixture(params=["sqlite", "postgres", "redis"])
async def kit(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[UrlKit]:
    opened = KITS[request.param](tmp_path)
    yield opened
    await opened.cleanup()


def worker_spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_the_worker_process_continues_the_producers_trace(
    kit: UrlKit, producer_spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    url = kit.shared_url()
    app = Conveyor(url)
    tracer = trace.get_tracer("web")
    with tracer.start_as_current_span("POST /orders"):
        ok = await app.enqueue("add", {"a": 1, "b": 2})
    bad = await app.enqueue("explode", attempts=1)
    await app.close()
    sent = {
        (span.attributes or {})["messaging.message.id"]: span
        for span in producer_spans.get_finished_spans()
        if span.kind is SpanKind.PRODUCER
    }
    assert set(sent) == {ok.id, bad.id}

    spans_file = tmp_path / "worker-spans.jsonl"
    env = {**clean_env(url), "TRACE_SPANS_FILE": str(spans_file)}
    cli = Cli(url=url, cwd=HERE, env=env)
    try:
        worker = cli.start("worker", "apps.traced:app", log=tmp_path / "worker.log")

        def both_consumed() -> dict[str, dict[str, Any]] | None:
            found = {
                row["attributes"]["messaging.message.id"]: row
                for row in worker_spans(spans_file)
                if row["kind"] == "CONSUMER"
            }
            return found if set(found) == {ok.id, bad.id} else None

        consumed = wait_until(both_consumed, timeout=30)
    finally:
        cli.stop_all()
    assert worker.pid != os.getpid()
    for job_id, row in consumed.items():
        producer = sent[job_id].context
        assert producer is not None
        assert row["pid"] == worker.pid
        assert row["trace_id"] == f"{producer.trace_id:032x}"
        assert row["parent_span_id"] == f"{producer.span_id:016x}"
        assert row["attributes"]["messaging.system"] == "conveyor"
        assert row["attributes"]["conveyor.attempt"] == 1
    assert consumed[ok.id]["name"] == "process add"
    assert consumed[ok.id]["attributes"]["conveyor.outcome"] == "complete"
    assert consumed[bad.id]["attributes"]["conveyor.outcome"] == "fail"
    assert "exception" in consumed[bad.id]["events"]


async def test_conveyor_enqueue_with_a_traced_app_stores_its_producer_context(
    cli: Cli, tmp_path: Path
) -> None:
    spans_file = tmp_path / "cli-spans.jsonl"
    cli.env["TRACE_SPANS_FILE"] = str(spans_file)
    job_id = cli.enqueue("add", {"a": 1, "b": 2}, "--app", "apps.traced:app")
    (sent,) = [row for row in worker_spans(spans_file) if row["kind"] == "PRODUCER"]
    assert sent["name"] == "send add"
    assert sent["attributes"]["messaging.message.id"] == job_id
    app = Conveyor(cli.url)
    job = await app.get_job(job_id)
    await app.close()
    assert job is not None
    assert job.metadata["traceparent"].split("-")[1:3] == [sent["trace_id"], sent["span_id"]]

"""examples/trace_console.py, whose output docs/how-to/stack.md shows: one trace
from the request through both attempts, the retry linked to the failed attempt."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

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


def json_objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects printed one after another (the console exporter's indented ones)."""
    decoder = json.JSONDecoder()
    found, at = [], 0
    while (start := text.find("{", at)) != -1:
        row, at = decoder.raw_decode(text, start)
        found.append(row)
    return found


def test_the_two_process_example_shows_one_trace_from_the_request_to_the_worker(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "trace_two_processes.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    web, worker_spans, worker_logs = re.split(
        r"^--- process 2.*\n", done.stdout.split("\n", 1)[1], flags=re.M
    )
    web_spans = {span["kind"]: span for span in json_objects(web)}
    request = web_spans["SpanKind.SERVER"]
    producer = web_spans["SpanKind.PRODUCER"]
    (consumer,) = json_objects(worker_spans)
    assert consumer["kind"] == "SpanKind.CONSUMER"
    logs = [json.loads(line) for line in worker_logs.splitlines()]

    assert request["resource"]["attributes"]["service.name"] == "shop-web"
    assert consumer["resource"]["attributes"]["service.name"] == "shop-worker"
    trace_id = request["context"]["trace_id"]
    assert producer["context"]["trace_id"] == consumer["context"]["trace_id"] == trace_id
    assert producer["parent_id"] == request["context"]["span_id"]
    assert consumer["parent_id"] == producer["context"]["span_id"]
    job_id = producer["attributes"]["messaging.message.id"]
    assert consumer["attributes"]["messaging.message.id"] == job_id
    assert consumer["attributes"]["conveyor.outcome"] == "complete"

    (handler_line,) = [row for row in logs if row["logger"] == "shop.email"]
    assert handler_line["job_id"] == job_id
    assert handler_line["trace_id"] == trace_id.removeprefix("0x")
    assert handler_line["worker_id"] == consumer["attributes"]["conveyor.worker.id"]

    # The docs' waterfall, drawn from this output: one bar per span, nested.
    (tmp_path / "trace.txt").write_text(done.stdout)
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "trace_waterfall.py"), "trace.txt", "trace.svg"],
        cwd=tmp_path,
        check=True,
        timeout=30,
    )
    svg = ElementTree.parse(tmp_path / "trace.svg").getroot()
    bars = [title.text for title in svg.iter("{http://www.w3.org/2000/svg}title")]
    request_id, producer_id, consumer_id = (
        span["context"]["span_id"].removeprefix("0x") for span in (request, producer, consumer)
    )
    assert bars == [
        f"span {request_id} parent -",
        f"span {producer_id} parent {request_id}",
        f"span {consumer_id} parent {producer_id}",
    ]
    texts = [text.text or "" for text in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert f"trace {trace_id.removeprefix('0x')}" in texts

"""One trace across two processes: this process plays the web app (a request
span, then an enqueue); a ``conveyor worker`` process runs the job. Each
process sets up the OpenTelemetry SDK with the console exporter and prints its
spans as the SDK shows them (JSON), and the worker logs as JSON lines.

    pip install -e '.[otel]' opentelemetry-sdk
    python examples/trace_two_processes.py

The PRODUCER span (this process) and the CONSUMER span (the worker's) have
the same trace id, and the CONSUMER span's parent is the PRODUCER span.
Shown in docs/how-to/stack.md ("One trace, two processes").
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from conveyor import Conveyor, JobContext

# The web process names itself; it starts the worker with another name.
SERVICE = os.environ.setdefault("TRACE_DEMO_SERVICE", "shop-web")
# Both processes share one SQLite file: this process picks it, the worker
# inherits the variable.
DATABASE = os.environ.setdefault("TRACE_DEMO_DB", str(Path(tempfile.mkdtemp()) / "jobs.db"))

provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stdout)))
trace.set_tracer_provider(provider)

app = Conveyor(f"sqlite:///{DATABASE}")
log = logging.getLogger("shop.email")


@app.task("email.send")
async def send(ctx: JobContext, to: str) -> str:
    log.info("sending to %s", to)  # in JSON logs: this job's id and trace id
    return "sent"


async def web_request() -> None:
    with trace.get_tracer("shop").start_as_current_span("POST /orders", kind=trace.SpanKind.SERVER):
        await send.enqueue(to="ada@example.com")
    await app.close()


def main() -> None:
    print(f"--- process 1 ({SERVICE}, pid {os.getpid()}): the request and its enqueue", flush=True)
    asyncio.run(web_request())
    provider.shutdown()
    here = Path(__file__).resolve().parent
    command = [sys.executable, "-m", "conveyor", "worker", f"{Path(__file__).stem}:app"]
    worker = subprocess.run(
        [*command, "--burst", "--log-format", "json"],
        cwd=here,
        env={**os.environ, "TRACE_DEMO_SERVICE": "shop-worker"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    print("--- process 2 (shop-worker, conveyor worker --burst): the attempt's span")
    print(worker.stdout, end="")
    print("--- process 2: its log lines (stderr, --log-format json)")
    print(worker.stderr, end="")
    shutil.rmtree(Path(DATABASE).parent, ignore_errors=True)


if __name__ == "__main__":
    main()

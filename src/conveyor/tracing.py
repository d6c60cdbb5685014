"""OpenTelemetry traces: a PRODUCER span per enqueued job, a CONSUMER span per attempt.

The W3C trace context travels in the job's metadata under the reserved keys
``traceparent`` and ``tracestate`` (:data:`RESERVED_METADATA_KEYS`), so every
store carries it without a schema change, and every enqueue path (they all end
in ``Runtime.enqueue_many``) writes it. An attempt that ends with an error
stores its own span's ``traceparent`` with that error (``ErrorInfo.traceparent``),
and the next attempt's span links to it.

Whether tracing is live is decided once, when the producer connects or the
worker is built (:func:`tracing_live`): without ``opentelemetry-api``, or with
it but no tracer provider set, the callers keep their plain code paths and pay
nothing per job.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Literal

import orjson

from conveyor.backends.base import NewJob, Outcome, Settlement

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, Tracer

    from conveyor.job import Job

logger = logging.getLogger("conveyor.tracing")

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
#: Metadata keys conveyor writes on enqueue when tracing is live (W3C trace context).
RESERVED_METADATA_KEYS = frozenset({TRACEPARENT, TRACESTATE})

SYSTEM = "conveyor"
ParentMode = Literal["parent", "link"]


def tracing_live() -> bool:
    """True when opentelemetry-api is importable and a real tracer provider is set
    (not the API's default proxy or no-op one). Called once per role, not per job."""
    try:
        from opentelemetry import trace
    except ImportError:
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _tracer() -> Tracer:
    from opentelemetry import trace

    from conveyor import __version__

    return trace.get_tracer("conveyor", __version__)


class ProducerTracing:
    """Starts one PRODUCER span per new job (a child of the caller's current span)
    and writes its context into the job's metadata before the store sees it."""

    def __init__(self) -> None:
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._tracer = _tracer()
        self._propagator = TraceContextTextMapPropagator()
        self._kind = SpanKind.PRODUCER

    def start(self, new_jobs: Sequence[NewJob]) -> list[Span]:
        from opentelemetry.trace import set_span_in_context

        spans = []
        for new in new_jobs:
            span = self._tracer.start_span(
                f"send {new.task}",
                kind=self._kind,
                attributes={
                    "messaging.system": SYSTEM,
                    "messaging.operation.type": "send",
                    "messaging.operation.name": "send",
                    "messaging.destination.name": new.queue,
                    "messaging.message.id": new.id,
                    "conveyor.task": new.task,
                },
            )
            carrier: dict[str, str] = {}
            self._propagator.inject(carrier, context=set_span_in_context(span))
            if carrier:
                new.metadata = _with_context(new.metadata, carrier)
            spans.append(span)
        return spans

    @staticmethod
    def end(spans: Sequence[Span], jobs: Sequence[Job]) -> None:
        for span, job in zip(spans, jobs, strict=False):
            if job.duplicate:
                span.set_attribute("conveyor.duplicate", True)
            span.end()

    @staticmethod
    def fail(spans: Sequence[Span], exc: BaseException) -> None:
        from opentelemetry.trace import Status, StatusCode

        for span in spans:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            span.end()


def _with_context(metadata: bytes | None, carrier: dict[str, str]) -> bytes:
    """The job's metadata with the trace context in (it replaces any stale one)."""
    merged: dict[str, Any] = orjson.loads(metadata) if metadata else {}
    for key in RESERVED_METADATA_KEYS:
        merged.pop(key, None)
    merged.update(carrier)
    return orjson.dumps(merged)


class ConsumerTracing:
    """Wraps each attempt in a CONSUMER span whose parent (or link) is the
    producer's context stored in the job's metadata."""

    def __init__(self, worker_id: str, parent: ParentMode = "parent") -> None:
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._tracer = _tracer()
        self._propagator = TraceContextTextMapPropagator()
        self._kind = SpanKind.CONSUMER
        self._link = parent == "link"
        self._worker_id = worker_id

    def start(self, job: Job) -> Span:
        from opentelemetry import context as otel_context

        carrier = _carrier(job.metadata)
        parent_ctx = self._propagator.extract(carrier) if carrier else None
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": job.queue,
            "messaging.message.id": job.id,
            "conveyor.task": job.task,
            "conveyor.attempt": job.attempts,
            "conveyor.worker.id": self._worker_id,
        }
        if job.tenant is not None:
            attributes["conveyor.tenant"] = job.tenant
        links = self._previous_attempt(job)
        if parent_ctx is not None and self._link:
            links.insert(0, _link_to(parent_ctx))
            parent_ctx = None
        # A root span without a stored context (enqueued before tracing was on) or
        # in link mode; else a child of the producer's span.
        return self._tracer.start_span(
            f"process {job.task}",
            context=parent_ctx if parent_ctx is not None else otel_context.Context(),
            kind=self._kind,
            attributes=attributes,
            links=links,
        )

    def _previous_attempt(self, job: Job) -> list[Link]:
        """A link to the span of the attempt that ended with the job's last error,
        when that attempt was traced (its worker stored the context with the error;
        an attempt whose worker died stored nothing)."""
        error = job.error
        if error is None or error.traceparent is None:
            return []
        context = self._propagator.extract({TRACEPARENT: error.traceparent})
        link = _link_to(context, {"conveyor.link": "previous_attempt"})
        if not link.context.is_valid:
            return []
        return [link]

    def activate(self, span: Span) -> AbstractContextManager[Any]:
        """Make ``span`` current, so the handler's own spans nest under it."""
        from opentelemetry.trace import use_span

        return use_span(span, end_on_exit=False, record_exception=False)

    def end(self, span: Span, settlement: Settlement | None) -> None:
        from opentelemetry.trace import Status, StatusCode

        if settlement is None:
            span.set_attribute("conveyor.outcome", "lease_lost")
        else:
            span.set_attribute("conveyor.outcome", settlement.outcome.value)
            error = settlement.error
            if error is not None and settlement.outcome in (Outcome.FAIL, Outcome.RETRY):
                # The exception as record_exception writes it, from what the executor kept.
                span.add_event(
                    "exception",
                    {
                        "exception.type": error.type,
                        "exception.message": error.message,
                        "exception.stacktrace": error.traceback or "",
                    },
                )
                span.set_status(Status(StatusCode.ERROR, f"{error.type}: {error.message}"))
            if error is not None:
                # Stored with the error, so the next attempt's span can link back here.
                error.traceparent = self._traceparent(span)
        span.end()

    def _traceparent(self, span: Span) -> str | None:
        from opentelemetry.trace import set_span_in_context

        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=set_span_in_context(span))
        return carrier.get(TRACEPARENT)

    @staticmethod
    def interrupted(span: Span, exc: BaseException) -> None:
        span.set_attribute("conveyor.outcome", "interrupted")
        span.record_exception(exc)
        span.end()


def _link_to(context: Context, attributes: dict[str, Any] | None = None) -> Link:
    from opentelemetry.trace import Link, get_current_span

    return Link(get_current_span(context).get_span_context(), attributes)


def _carrier(metadata: Any) -> dict[str, str] | None:
    if not metadata:
        return None
    parent = metadata.get(TRACEPARENT)
    if not isinstance(parent, str):
        return None
    carrier = {TRACEPARENT: parent}
    state = metadata.get(TRACESTATE)
    if isinstance(state, str):
        carrier[TRACESTATE] = state
    return carrier


def caller_context(headers: Mapping[str, str]) -> AbstractContextManager[None]:
    """The trace context an HTTP caller sent (W3C ``traceparent`` and
    ``tracestate`` headers), current while the request enqueues: the PRODUCER
    span continues the caller's trace. A span already current wins (a server
    instrumented with OpenTelemetry made it, itself from these headers)."""
    parent = headers.get(TRACEPARENT)
    if parent is None:
        return nullcontext()
    try:
        from opentelemetry.trace import get_current_span
    except ImportError:
        return nullcontext()
    if get_current_span().get_span_context().is_valid:
        return nullcontext()
    carrier = {TRACEPARENT: parent}
    state = headers.get(TRACESTATE)
    if state is not None:
        carrier[TRACESTATE] = state
    return _attached(carrier)


@contextmanager
def _attached(carrier: dict[str, str]) -> Iterator[None]:
    from opentelemetry import context as otel_context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    token = otel_context.attach(TraceContextTextMapPropagator().extract(carrier))
    try:
        yield
    finally:
        otel_context.detach(token)


def producer_tracing() -> ProducerTracing | None:
    return ProducerTracing() if tracing_live() else None


def consumer_tracing(worker_id: str, parent: ParentMode) -> ConsumerTracing | None:
    return ConsumerTracing(worker_id, parent) if tracing_live() else None


__all__ = [
    "RESERVED_METADATA_KEYS",
    "ConsumerTracing",
    "ProducerTracing",
    "caller_context",
    "consumer_tracing",
    "producer_tracing",
    "tracing_live",
]

"""Log output of the long-running commands: text (escaped) or JSON, one record a line.

Messages can carry text that a job chose (an exception's message, a payload
value): in the text format their control characters are escaped, so a handler
cannot start a line of its own (a forged log record) or send terminal escapes.
The JSON format is safe by construction (one object a line, strings quoted).

A JSON record names the job it was logged for (job id, task, attempt) from
:data:`current_job`, which the executor sets for each run: the worker's own
lines and the handler's lines alike. The worker id comes from the process
(:func:`set_worker_id`), the trace id from the current OpenTelemetry span.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import orjson

if TYPE_CHECKING:
    from conveyor.job import Job

LogFormat = Literal["text", "json"]

#: The job a run is for; set by the executor in the run's own task (and copied
#: into a sync handler's thread), read by the JSON formatter.
current_job: ContextVar[Job | None] = ContextVar("conveyor_current_job", default=None)

_worker_id: str | None = None


def set_worker_id(worker_id: str | None) -> None:
    """The worker this process runs (one per ``conveyor worker`` process)."""
    global _worker_id
    _worker_id = worker_id


# C0 and C1 control characters, DEL included; a tab is harmless and kept.
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_ESCAPES = {0x0A: "\\n", 0x0D: "\\r"}
_TABLE = {code: _ESCAPES.get(code, f"\\x{code:02x}") for code in (*range(0x20), *range(0x7F, 0xA0))}
_TABLE.pop(0x09)
_TABLE_KEEP_NEWLINES = {code: text for code, text in _TABLE.items() if code != 0x0A}


def escape_controls(text: str) -> str:
    """``text`` on one line, its control characters written as escapes."""
    return text.translate(_TABLE) if _CONTROLS.search(text) else text


class SafeTextFormatter(logging.Formatter):
    """The standard text format with the message on one line; a traceback keeps
    its lines but each is indented, so none can pass for a record of its own."""

    def format(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.getMessage())
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        text = self.formatMessage(record)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        for extra in (record.exc_text, record.stack_info and self.formatStack(record.stack_info)):
            if extra:
                lines = extra.translate(_TABLE_KEEP_NEWLINES).splitlines()
                text += "\n" + "\n".join("    " + line for line in lines)
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, and the job,
    worker and trace it belongs to where known."""

    def __init__(self) -> None:
        super().__init__()
        self._trace_id = _trace_id_reader()

    def format(self, record: logging.LogRecord) -> str:
        row: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        job = current_job.get()
        if job is not None:
            row["job_id"] = job.id
            row["task"] = job.task
            row["attempt"] = job.attempts
        if _worker_id is not None:
            row["worker_id"] = _worker_id
        trace_id = self._trace_id()
        if trace_id is not None:
            row["trace_id"] = trace_id
        if record.exc_info:
            row["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            row["exception"] = record.exc_text
        return orjson.dumps(row, default=str).decode()


def _trace_id_reader() -> Callable[[], str | None]:
    try:
        from opentelemetry.trace import get_current_span
    except ImportError:
        return lambda: None

    def read() -> str | None:
        context = get_current_span().get_span_context()
        return f"{context.trace_id:032x}" if context.is_valid else None

    return read


def setup_logging(level: str, log_format: LogFormat = "text") -> None:
    """JSON lines, or text: rich on a terminal, plain timestamped lines otherwise."""
    handler: logging.Handler
    if log_format == "json":
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
    else:
        from rich.console import Console
        from rich.logging import RichHandler

        stderr = Console(stderr=True)
        if stderr.is_terminal:
            handler = RichHandler(console=stderr, show_path=False, markup=False)
            handler.setFormatter(SafeTextFormatter("%(message)s", datefmt="[%X]"))
        else:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(
                SafeTextFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
            )
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)

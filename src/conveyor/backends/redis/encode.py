"""Python values -> script arguments (the other way from decode.py).

Scripts take text: ``''`` stands for "none", floats go as their exact repr.
"""

from __future__ import annotations

from typing import Any

from conveyor.backends import base


def opt(value: Any) -> Any:
    return "" if value is None else value


def float_text(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def filter_args(where: base.JobFilter) -> list[Any]:
    """A :class:`JobFilter` as ``select-2.lua`` reads it."""
    states = "" if where.states is None else ",".join(s.value for s in where.states)
    if where.states is not None and not where.states:
        states = ","  # an empty list matches nothing
    return [
        states,
        opt(where.queue),
        opt(where.task),
        opt(where.tenant),
        where.failure_reason.value if where.failure_reason is not None else "",
        opt(where.idempotency_key),
        float_text(where.finished_before),
        opt(where.workflow_id),
    ]

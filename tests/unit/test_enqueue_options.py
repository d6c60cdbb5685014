"""Enqueue options that no backend could store faithfully are refused up front,
with a typed error, before anything is sent."""

from __future__ import annotations

from typing import Any

import pytest

from conveyor.producer import JobBuilder
from conveyor.settings import load_settings


def build(**options: Any) -> Any:
    return JobBuilder(load_settings(), {}).build("t", None, options)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"idempotency_key": ""}, ValueError, "idempotency_key"),
        ({"idempotency_key": 42}, ValueError, "idempotency_key"),
        ({"tenant": 7}, TypeError, "tenant"),
        ({"priority": 2**31}, ValueError, "priority"),
        ({"priority": -(2**31) - 1}, ValueError, "priority"),
        ({"priority": "high"}, ValueError, "high"),
    ],
)
def test_bad_options_are_refused(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        build(**options)


def test_good_options_pass_through() -> None:
    new = build(idempotency_key="k-1", tenant="", priority="-5")
    assert (new.idempotency_key, new.tenant, new.priority) == ("k-1", "", -5)
    assert build(priority=2**31 - 1).priority == 2**31 - 1


@pytest.mark.parametrize(
    ("payload", "kind"),
    [([1, 2], "a list"), ("x", "a string"), (3, "a number"), (True, "a boolean")],
)
def test_a_payload_that_is_not_a_json_object_is_refused(payload: Any, kind: str) -> None:
    builder = JobBuilder(load_settings(), {})
    with pytest.raises(ValueError, match=f"must be a JSON object.*not {kind}"):
        builder.build("t", payload, {})


def test_no_payload_is_an_empty_object() -> None:
    assert JobBuilder(load_settings(), {}).build("t", None, {}).payload == b"{}"

"""``app.queue(...)`` options: fairness and weights are checked when declared."""

from __future__ import annotations

from typing import Any

import pytest

from conveyor.app import Conveyor
from conveyor.backends.base import QueueInfo
from conveyor.errors import ConfigurationError, InvalidQueueOptions


def declared(**options: Any) -> QueueInfo:
    app = Conveyor("memory://")
    app.queue("emails", **options)
    return app.runtime.queues["emails"]


def test_a_fair_queue_with_weights_is_declared() -> None:
    info = declared(max_size=10, ttl="1m", fairness="tenant", weights={"org-1": 3, "org-2": 0.5})
    assert (info.max_size, info.ttl, info.fairness) == (10, 60.0, "tenant")
    assert info.weights == {"org-1": 3.0, "org-2": 0.5}
    assert (info.weight("org-1"), info.weight("someone"), info.weight(None)) == (3.0, 1.0, 1.0)
    assert info.to_dict()["fairness"] == "tenant"


def test_a_plain_queue_has_no_fairness() -> None:
    info = declared(max_size=5)
    assert (info.fairness, info.weights) == (None, {})
    assert declared(fairness="tenant").weights == {}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fairness": "round-robin"}, "fairness must be 'tenant' or None, not 'round-robin'"),
        ({"weights": {"a": 2}}, "weights need fairness='tenant'"),
        ({"fairness": "tenant", "weights": {"a": 0}}, "weight of tenant 'a' must be a positive"),
        ({"fairness": "tenant", "weights": {"a": -1.5}}, "must be a positive number"),
        ({"fairness": "tenant", "weights": {"a": "3"}}, "must be a positive number, not '3'"),
        ({"fairness": "tenant", "weights": {"a": True}}, "must be a positive number"),
        ({"fairness": "tenant", "weights": {"a": float("nan")}}, "must be a positive number"),
        ({"fairness": "tenant", "weights": {"a": float("inf")}}, "must be a positive number"),
        ({"fairness": "tenant", "weights": {"": 2}}, "tenant must be a non-empty string"),
        ({"fairness": "tenant", "weights": {7: 2}}, "tenant must be a non-empty string, not 7"),
        ({"fairness": "tenant", "weights": [("a", 2)]}, "weights must be a mapping"),
        ({"max_size": 0}, "max_size must be an integer >= 1"),
    ],
)
def test_bad_queue_options_raise_a_typed_error(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidQueueOptions, match="queue 'emails'") as raised:
        declared(**options)
    assert message in str(raised.value)
    assert isinstance(raised.value, ConfigurationError)
    assert isinstance(raised.value, ValueError)

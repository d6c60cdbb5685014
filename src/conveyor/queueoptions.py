"""Validation of ``app.queue(...)`` options into the :class:`QueueInfo` the
backend stores."""

from __future__ import annotations

import math
from collections.abc import Mapping

from conveyor.backends.records import FAIRNESS_TENANT, QueueInfo
from conveyor.durations import parse_duration
from conveyor.errors import InvalidQueueOptions


def queue_info(
    name: str,
    max_size: int | None = None,
    ttl: float | str | None = None,
    fairness: str | None = None,
    weights: Mapping[str, float] | None = None,
) -> QueueInfo:
    """The options of queue ``name``, checked; :class:`InvalidQueueOptions`
    names the queue and the problem."""
    if not isinstance(name, str) or not name:
        raise InvalidQueueOptions(f"queue name must be a non-empty string, not {name!r}")
    if max_size is not None and (
        isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1
    ):
        raise InvalidQueueOptions(f"queue {name!r}: max_size must be an integer >= 1")
    if fairness is not None and fairness != FAIRNESS_TENANT:
        raise InvalidQueueOptions(
            f"queue {name!r}: fairness must be {FAIRNESS_TENANT!r} or None, not {fairness!r}"
        )
    checked: dict[str, float] = {}
    if weights:
        if fairness is None:
            raise InvalidQueueOptions(f"queue {name!r}: weights need fairness={FAIRNESS_TENANT!r}")
        if not isinstance(weights, Mapping):
            raise InvalidQueueOptions(f"queue {name!r}: weights must be a mapping tenant -> weight")
        for tenant, weight in weights.items():
            if not isinstance(tenant, str) or not tenant:
                raise InvalidQueueOptions(
                    f"queue {name!r}: a weight's tenant must be a non-empty string, not {tenant!r}"
                )
            if (
                isinstance(weight, bool)
                or not isinstance(weight, int | float)
                or not math.isfinite(weight)
                or weight <= 0
            ):
                raise InvalidQueueOptions(
                    f"queue {name!r}: the weight of tenant {tenant!r} must be a positive number, "
                    f"not {weight!r}"
                )
            checked[tenant] = float(weight)
    elif weights is not None and not isinstance(weights, Mapping):
        raise InvalidQueueOptions(f"queue {name!r}: weights must be a mapping tenant -> weight")
    return QueueInfo(
        name,
        max_size=max_size,
        ttl=parse_duration(ttl) if ttl is not None else None,
        fairness=fairness,
        weights=checked,
    )

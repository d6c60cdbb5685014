"""The records a backend stores and returns besides jobs: circuits, queues,
workers, schedules and finished-run statistics. Part of the backend contract
(re-exported by :mod:`conveyor.backends.base`)."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from conveyor.job import JobState


class CircuitState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(slots=True)
class CircuitInfo:
    task: str
    state: CircuitState
    failures: int
    open_until: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "state": self.state.value,
            "failures": self.failures,
            "open_until": self.open_until,
        }


#: The one fairness mode a queue may have: round-robin across ``Job.tenant``.
FAIRNESS_TENANT = "tenant"


@dataclass(slots=True)
class QueueInfo:
    name: str
    paused: bool = False
    max_size: int | None = None
    ttl: float | None = None
    fairness: str | None = None
    """``"tenant"``: claims take this queue's jobs weighted round-robin across
    tenants (see the rule in :mod:`conveyor.backends.base`); ``None``: plain."""
    weights: dict[str, float] = field(default_factory=dict)
    """Tenant -> weight (> 0) of a fair queue; a tenant not listed weighs 1."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "paused": self.paused,
            "max_size": self.max_size,
            "ttl": self.ttl,
            "fairness": self.fairness,
            "weights": dict(self.weights),
        }

    def weight(self, tenant: str | None) -> float:
        """The weight of ``tenant`` (1 when not listed; ``None`` is never listed)."""
        return 1.0 if tenant is None else self.weights.get(tenant, 1.0)


@dataclass(slots=True, frozen=True)
class TenantCount:
    """Jobs of one tenant in one queue (``Backend.tenant_counts``)."""

    tenant: str | None
    waiting: int
    """``waiting`` and ``delayed`` jobs, due or not."""
    active: int

    def to_dict(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "waiting": self.waiting, "active": self.active}


@dataclass(slots=True, frozen=True)
class KeyCount:
    """Jobs of one ``(task, concurrency_key)`` group (``Backend.key_counts``);
    ``key`` ``None`` is the task's keyless group."""

    task: str
    key: str | None
    active: int
    waiting: int | None
    """``waiting`` jobs (not delayed); ``None`` for a task not asked about (its
    keys hold nothing back, so its waiting jobs are not counted)."""

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "key": self.key, "active": self.active, "waiting": self.waiting}


@dataclass(slots=True, frozen=True)
class RateKeyUse:
    """Starts in the current window of one ``(task, rate_limit_key)``
    (``Backend.rate_key_usage``); ``key`` ``None`` is the keyless window."""

    task: str
    key: str | None
    used: int

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "key": self.key, "used": self.used}


def rank_key_counts(counts: Iterable[KeyCount], limit: int) -> list[KeyCount]:
    """``Backend.key_counts``' order: most active, then most waiting, then task
    and key (bytewise, ``None`` first); the first ``limit``."""
    ranked = sorted(
        counts,
        key=lambda c: (-c.active, -(c.waiting or 0), c.task, c.key is not None, c.key or ""),
    )
    return ranked[: max(0, limit)]


def rank_rate_key_uses(uses: Iterable[RateKeyUse], limit: int) -> list[RateKeyUse]:
    """``Backend.rate_key_usage``' order: most starts, then task and key
    (``None`` first); windows without a start left out; the first ``limit``."""
    ranked = sorted(
        (u for u in uses if u.used > 0),
        key=lambda u: (-u.used, u.task, u.key is not None, u.key or ""),
    )
    return ranked[: max(0, limit)]


@dataclass(slots=True)
class WorkerInfo:
    id: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    active: int
    started_at: float
    last_seen: float = 0.0
    """Stamped by the backend's clock on every heartbeat."""
    heartbeat_interval: float = 10.0
    """Seconds between this worker's heartbeats: readers judge its liveness with
    it (alive while ``last_seen`` is younger than 3 intervals)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "queues": list(self.queues),
            "concurrency": self.concurrency,
            "active": self.active,
            "started_at": self.started_at,
            "last_seen": self.last_seen,
            "heartbeat_interval": self.heartbeat_interval,
        }


class MisfirePolicy(enum.StrEnum):
    """What a scheduler does with fires it missed (no scheduler was running)."""

    SKIP = "skip"  # forget missed slots; fire at the next slot from now
    RUN_ONCE = "run_once"  # fire once for all missed slots, then go on from now


@dataclass(slots=True)
class ScheduleSpec:
    """A schedule as the application's code declares it (``app.schedule``).

    Exactly one of ``cron`` / ``every`` is set. ``payload`` and ``options`` are
    JSON-encoded (``options``: enqueue options such as queue, priority,
    attempts). ``fingerprint`` changes whenever any of these fields does.
    """

    name: str
    task: str
    payload: bytes
    cron: str | None = None
    every: float | None = None
    timezone: str = "UTC"
    start: float | None = None
    end: float | None = None
    limit: int | None = None
    misfire: MisfirePolicy = MisfirePolicy.SKIP
    options: bytes = b"{}"
    fingerprint: str = ""


@dataclass(slots=True)
class ScheduleRecord:
    """A stored schedule: its definition plus the state operators and schedulers change."""

    spec: ScheduleSpec
    cron: str | None
    """The cron in force: the spec's, or an operator's ``set-cron`` override."""
    every: float | None
    """The interval in force (same rule as ``cron``)."""
    paused: bool = False
    next_fire_at: float | None = None
    """POSIX time of the next slot; ``None`` when finished (``end`` passed or
    ``limit`` reached)."""
    fires: int = 0
    last_fire_at: float | None = None
    updated_at: float = 0.0

    @property
    def name(self) -> str:
        return self.spec.name

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly view for the CLI and the HTTP API: times as POSIX
        seconds, plus ``*_iso`` UTC strings; payload and options decoded."""
        spec = self.spec
        return {
            "name": spec.name,
            "task": spec.task,
            "payload": _json_or_text(spec.payload),
            "options": _json_or_text(spec.options),
            "cron": self.cron,
            "every": self.every,
            "timezone": spec.timezone,
            "declared_cron": spec.cron,
            "declared_every": spec.every,
            "overridden": (self.cron, self.every) != (spec.cron, spec.every),
            "start": spec.start,
            "end": spec.end,
            "limit": spec.limit,
            "misfire": spec.misfire.value,
            "paused": self.paused,
            "next_fire_at": self.next_fire_at,
            "next_fire_iso": _iso(self.next_fire_at),
            "fires": self.fires,
            "last_fire_at": self.last_fire_at,
            "last_fire_iso": _iso(self.last_fire_at),
            "updated_at": self.updated_at,
            "fingerprint": spec.fingerprint,
        }


def _iso(when: float | None) -> str | None:
    if when is None:
        return None
    try:
        return datetime.fromtimestamp(when, UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None  # a stored time no calendar holds (from before enqueue bounded it)


def _json_or_text(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")


#: Upper bounds (seconds) of the job-duration histogram buckets; the last is +Inf.
DURATION_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
    float("inf"),
)  # fmt: skip


@dataclass(slots=True)
class JobStat:
    """Finished runs of one ``(task, queue, status)``: counts and durations.

    Workers report increments; the backend adds them into cumulative totals
    (``/metrics`` counters, never pruned) and into per-minute series (dashboard
    throughput, pruned by age). ``buckets[i]`` counts runs with a duration
    ``<= DURATION_BUCKETS[i]`` and above the previous bound (not cumulative).
    """

    task: str
    queue: str
    status: str
    """``completed``, ``failed``, ``retried``, ``cancelled`` or ``expired``."""
    count: int = 0
    duration_sum: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * len(DURATION_BUCKETS))
    minute: float = 0.0
    """Series rows: POSIX start of the minute (backend clock). Totals: 0."""


def fit_buckets(counts: Sequence[int]) -> list[int]:
    """``counts`` as one int per ``DURATION_BUCKETS`` bound: a shorter array is
    padded with zeros, a longer one cut (what every backend stores and returns)."""
    width = len(DURATION_BUCKETS)
    return ([int(n) for n in counts] + [0] * width)[:width]


COUNTED_STATES = tuple(JobState)

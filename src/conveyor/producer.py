"""Turns what a producer passes to ``enqueue`` into a :class:`NewJob` for the backend.

Task defaults are resolved once per task name and cached, so the common case
(payload only, no options) is one JSON encode, one id and one record: this is
the hot path of ``enqueue_many``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from conveyor import serialization
from conveyor.backends.base import NewJob
from conveyor.durations import parse_duration
from conveyor.errors import (
    ConcurrencyKeyError,
    EnqueueError,
    PayloadTooLarge,
    RateLimitKeyError,
    UnknownTask,
)
from conveyor.ids import new_id
from conveyor.job import DependencyPolicy, Job

if TYPE_CHECKING:
    from conveyor.settings import Settings
    from conveyor.task import KeySource, Task

ENQUEUE_OPTIONS = frozenset(
    {
        "delay",
        "run_at",
        "priority",
        "attempts",
        "timeout",
        "idempotency_key",
        "tenant",
        "metadata",
        "queue",
        "ttl",
        "worker",
        "depends_on",
        "on_dependency_failure",
        "idempotency_ttl",
        "concurrency_key",
        "rate_limit_key",
        "debounce",
    }
)


def check_task_known(tasks: Mapping[str, Task], name: str) -> None:
    """Refuse a task name that the app serving an enqueue does not know.

    The HTTP API and ``conveyor enqueue --app`` check this: a job for a task that
    no handler of the app runs would only dead-letter later as ``unknown_task``.
    (A plain ``app.enqueue`` may target tasks registered in another process.)"""
    if name not in tasks:
        known = ", ".join(sorted(tasks)) or "none"
        raise UnknownTask(f"no task named {name!r} is registered in the app (known: {known})")


#: Priorities every backend stores as they are (PostgreSQL: a 32-bit integer).
PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1
#: Longest delay, TTL or timeout (100 years): beyond any real need, small
#: enough that a store or a view can add it to a time and show the result.
MAX_SECONDS = 100 * 365 * 86400.0
#: Latest ``run_at``: the last second of year 9999, the end of ``datetime``.
MAX_RUN_AT = 253_402_300_799.0
#: Most attempts (PostgreSQL stores a 32-bit integer).
MAX_ATTEMPTS = 2**31 - 1


def _check_seconds(name: str, value: float | None, allow_zero: bool) -> None:
    if value is None:
        return
    low_ok = value >= 0 if allow_zero else value > 0
    if not (math.isfinite(value) and low_ok and value <= MAX_SECONDS):
        least = "0" if allow_zero else "more than 0"
        raise ValueError(f"{name} must be {least} and at most 100 years (seconds), not {value!r}")


def check_bounds(job: NewJob) -> NewJob:
    """Refuse times no store or view can hold: every entry point (Python, CLI,
    HTTP) builds its jobs here, so they all share these bounds."""
    _check_seconds("delay", job.delay, allow_zero=True)
    _check_seconds("timeout", job.timeout, allow_zero=False)
    _check_seconds("ttl", job.ttl, allow_zero=False)
    run_at = job.run_at
    if run_at is not None and not (math.isfinite(run_at) and 0 < run_at <= MAX_RUN_AT):
        raise ValueError(
            f"run_at must be a POSIX time after 1970 and before year 10000, not {run_at!r}"
        )
    if not 1 <= job.max_attempts <= MAX_ATTEMPTS:
        raise ValueError(f"attempts must be from 1 to {MAX_ATTEMPTS}, not {job.max_attempts}")
    return job


@dataclass(frozen=True, slots=True)
class _Defaults:
    queue: str
    priority: int
    max_attempts: int
    timeout: float | None
    ttl: float | None
    idempotency_ttl: float
    key_of: KeySource = None
    debounce: float | None = None
    rate_key_of: KeySource = None
    known: bool = False
    """The task is registered here (its rate limit is known)."""
    rate_limited: bool = False
    plain: bool = True
    """No per-job rule to apply: the fast path may build the job (worked out
    once per task here, not once per job)."""


def _exact_float(name: str, value: Any) -> float:
    """``value`` as a float, refusing an integer a float cannot hold exactly."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a number or a datetime, not a bool")
    if isinstance(value, int) and abs(value) > 2**53:
        raise ValueError(f"{name} is out of range: {value}")
    return float(value)


class JobBuilder:
    def __init__(self, settings: Settings, tasks: Mapping[str, Task]) -> None:
        self._settings = settings
        self._tasks = tasks
        self._defaults: dict[str, _Defaults] = {}

    def forget(self) -> None:
        """Drop cached defaults (a task was registered)."""
        self._defaults.clear()

    def _defaults_for(self, name: str) -> _Defaults:
        found = self._defaults.get(name)
        if found is None:
            task = self._tasks.get(name)
            options = task.options if task else None
            key_of = options.concurrency_key if options else None
            debounce = options.debounce if options else None
            rate_key_of = options.rate_limit_key if options else None
            found = _Defaults(
                queue=options.queue if options else "default",
                priority=options.priority if options else 0,
                max_attempts=(options.attempts if options else None)
                or self._settings.default_attempts,
                timeout=options.timeout if options else None,
                ttl=options.ttl if options else None,
                idempotency_ttl=(options.idempotency_ttl if options else None)
                or self._settings.idempotency_ttl,
                key_of=key_of,
                debounce=debounce,
                rate_key_of=rate_key_of,
                known=options is not None,
                rate_limited=options is not None and options.rate_limit is not None,
                plain=key_of is None and debounce is None and rate_key_of is None,
            )
            self._defaults[name] = found
        return found

    def _encode(self, payload: Any) -> bytes:
        try:
            data = orjson.dumps({} if payload is None else payload, option=orjson.OPT_NON_STR_KEYS)
        except TypeError:
            data = serialization.dumps(payload)  # raises the typed SerializationError
        if data[0] != 0x7B:  # not "{": a handler gets the payload's keys as keyword arguments
            raise ValueError(
                f'the payload must be a JSON object (like {{"to": "a@b.c"}}), '
                f"not {_json_kind(data)}"
            )
        limit = self._settings.max_payload_bytes
        if len(data) > limit:
            raise PayloadTooLarge(len(data), limit)
        return data

    def build(
        self, task: str, payload: Any, options: Mapping[str, Any], job_id: str | None = None
    ) -> NewJob:
        if not isinstance(task, str) or not task:
            raise TypeError("the task name must be a non-empty string")
        d = self._defaults_for(task)
        data = self._encode(payload)
        if not options and d.plain:
            # Positional: a third of the cost of keywords, on the hot path. The
            # order is NewJob's: id task queue payload priority max_attempts
            # timeout delay run_at ttl idempotency_key idempotency_ttl.
            return NewJob(
                job_id or new_id(),
                task,
                d.queue,
                data,
                d.priority,
                d.max_attempts,
                d.timeout,
                0.0,
                None,
                d.ttl,
                None,
                d.idempotency_ttl,
            )
        return self._build_with_options(task, d, payload, data, options, job_id or new_id())

    def _build_with_options(
        self,
        task: str,
        d: _Defaults,
        payload: Any,
        data: bytes,
        options: Mapping[str, Any],
        job_id: str,
    ) -> NewJob:
        unknown = set(options) - ENQUEUE_OPTIONS
        if unknown:
            raise TypeError(f"unknown enqueue option(s): {', '.join(sorted(unknown))}")
        settings = self._settings
        queue = options.get("queue") or d.queue
        ttl = options.get("ttl", d.ttl)
        worker = options.get("worker")
        if worker:
            queue = f"worker.{worker}"
            if ttl is None:
                ttl = settings.worker_queue_ttl
        run_at = options.get("run_at")
        if isinstance(run_at, datetime):
            if run_at.tzinfo is None:
                raise ValueError("run_at must be timezone-aware (use datetime.now(timezone.utc))")
            run_at = run_at.timestamp()
        attempts = options.get("attempts")
        if attempts is not None and (not isinstance(attempts, int) or attempts < 1):
            raise ValueError(f"attempts must be an integer >= 1, not {attempts!r}")
        timeout = options.get("timeout", d.timeout)
        metadata = options.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise TypeError("metadata must be a dict")
        priority = options.get("priority")
        if priority is not None:
            priority = int(priority)
            if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
                raise ValueError(f"priority must be a 32-bit integer, not {priority}")
        key = options.get("idempotency_key")
        if key is not None and (not isinstance(key, str) or not key):
            raise ValueError(f"idempotency_key must be a non-empty string, not {key!r}")
        tenant = options.get("tenant")
        if tenant is not None and not isinstance(tenant, str):
            raise TypeError(f"tenant must be a string, not {type(tenant).__name__}")
        depends_on, on_failure = dependencies(options)
        debounce = _debounce(options, d.debounce, key)
        if debounce is not None and (depends_on or options.get("delay") or run_at is not None):
            raise ValueError(
                "debounce decides when the job runs: drop delay, run_at and depends_on"
            )
        return check_bounds(
            NewJob(
                id=job_id,
                task=task,
                queue=queue,
                payload=data,
                priority=priority if priority is not None else d.priority,
                max_attempts=attempts or d.max_attempts,
                timeout=parse_duration(timeout) if timeout is not None else None,
                delay=parse_duration(options.get("delay") or 0),
                run_at=_exact_float("run_at", run_at) if run_at is not None else None,
                ttl=parse_duration(ttl) if ttl is not None else None,
                idempotency_key=key,
                idempotency_ttl=_positive_duration("idempotency_ttl", options, d.idempotency_ttl),
                tenant=tenant,
                metadata=serialization.dumps(metadata) if metadata else None,
                depends_on=depends_on,
                on_dependency_failure=on_failure,
                concurrency_key=_concurrency_key(task, d.key_of, options, payload, tenant),
                rate_limit_key=_rate_limit_key(task, d, options, payload, tenant),
                debounce=debounce,
            )
        )


def _concurrency_key(
    task: str, key_of: KeySource, options: Mapping[str, Any], payload: Any, tenant: str | None
) -> str | None:
    """The job's concurrency key: the enqueue's, else its task's rule applied."""
    given = _given_key(options, "concurrency_key")
    if given is not None:
        return given
    return _key_by_rule(task, "concurrency_key", key_of, payload, tenant, ConcurrencyKeyError)


def _rate_limit_key(
    task: str, d: _Defaults, options: Mapping[str, Any], payload: Any, tenant: str | None
) -> str | None:
    """The job's rate-limit window: the enqueue's, else its task's rule applied.
    A task registered here must declare a per-key rate limit for a key to mean
    anything (its workers would count the job in the task's one window)."""
    given = _given_key(options, "rate_limit_key")
    if given is not None:
        if d.known and d.rate_key_of is None:
            why = "has no rate_limit" if not d.rate_limited else "declares no rate_limit_key"
            raise RateLimitKeyError(
                f"task {task!r} {why}: its rate limit is not per key, so a job's "
                f"rate_limit_key would not count (declare rate_limit= and rate_limit_key= "
                f"on the task)"
            )
        return given
    return _key_by_rule(task, "rate_limit_key", d.rate_key_of, payload, tenant, RateLimitKeyError)


def _given_key(options: Mapping[str, Any], option: str) -> str | None:
    """The key an enqueue sets itself (``concurrency_key=``, ``rate_limit_key=``)."""
    given = options.get(option)
    if given is not None and (not isinstance(given, str) or not given):
        raise ValueError(f"{option} must be a non-empty string, not {given!r}")
    return given


def _key_by_rule(
    task: str,
    option: str,
    key_of: KeySource,
    payload: Any,
    tenant: str | None,
    error: type[EnqueueError],
) -> str | None:
    """A task's key rule applied at enqueue: ``"tenant"`` or a function of the
    payload, which must return a non-empty string (else ``error``)."""
    if key_of is None:
        return None
    if key_of == "tenant":
        return tenant
    assert callable(key_of)
    try:
        key = key_of({} if payload is None else payload)
    except Exception as exc:
        raise error(
            f"the {option} function of task {task!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(key, str) or not key:
        raise error(
            f"the {option} function of task {task!r} must return a non-empty string, not {key!r}"
        )
    return key


def _debounce(options: Mapping[str, Any], default: float | None, key: str | None) -> float | None:
    given = options.get("debounce")
    debounce = positive_duration("debounce", given) if given is not None else default
    if debounce is not None and key is None:
        raise ValueError("debounce needs an idempotency_key (the key whose job it postpones)")
    return debounce


def check_debounced_keys(jobs: Sequence[NewJob]) -> None:
    """Refuse a batch holding one idempotency key both with and without debounce:
    the store resolves a key's later entries against its first (see the contract)."""
    if len(jobs) < 2 or not any(job.debounce for job in jobs):
        return
    debounced: dict[str, bool] = {}
    for job in jobs:
        key = job.idempotency_key
        if key is not None and debounced.setdefault(key, bool(job.debounce)) is not bool(
            job.debounce
        ):
            raise ValueError(
                f"idempotency key {key!r} is in one batch with and without debounce: "
                "debounce every entry of the key or none"
            )


def dependencies(options: Mapping[str, Any]) -> tuple[list[str], DependencyPolicy]:
    """``depends_on`` (jobs or ids, in order, repeats dropped) and the policy."""
    given = options.get("depends_on") or ()
    if isinstance(given, str | Job) or not isinstance(given, Iterable):
        raise TypeError("depends_on must be a list of jobs or job ids")
    ids: list[str] = []
    for item in given:
        job_id = item.id if isinstance(item, Job) else item
        if not isinstance(job_id, str) or not job_id:
            raise TypeError(f"depends_on takes jobs or job ids, not {item!r}")
        ids.append(job_id)
    policy = options.get("on_dependency_failure", DependencyPolicy.CANCEL)
    try:
        return list(dict.fromkeys(ids)), DependencyPolicy(policy)
    except ValueError:
        raise ValueError(
            f"on_dependency_failure must be 'cancel' or 'run', not {policy!r}"
        ) from None


def _json_kind(data: bytes) -> str:
    first = data[:1]
    if first == b"[":
        return "a list"
    if first == b'"':
        return "a string"
    if data in (b"true", b"false"):
        return "a boolean"
    if data == b"null":
        return "null"
    return "a number"


def _positive_duration(name: str, options: Mapping[str, Any], default: float) -> float:
    """The duration option ``name`` (seconds or a string like ``"30m"``), > 0."""
    given = options.get(name)
    return default if given is None else positive_duration(name, given)


def positive_duration(name: str, given: float | str) -> float:
    """``given`` in seconds; a ``ValueError`` naming option ``name`` unless > 0."""
    try:
        value = parse_duration(given)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    if value <= 0:
        raise ValueError(f"{name} must be a positive duration, not {given!r}")
    return value

"""Health endpoints (SPEC §6).

``/health/live``, ``/health/startup`` and ``/health/ready`` are open (probes
carry no token); ``/health/backend``, ``/health/queues`` and ``/health`` show
queue names and worker hosts, so they need the ``read`` scope.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import Response

from conveyor.dispatch.probe import BrokerHealth
from conveyor.errors import BackendError
from conveyor.server.auth import Scope
from conveyor.server.responses import json_response
from conveyor.server.routing import route, state_of
from conveyor.server.snapshot import QueueSnapshot, read_snapshot
from conveyor.settings import Settings

Status = Literal["healthy", "degraded", "unhealthy"]
_RANK: dict[str, int] = {"healthy": 0, "degraded": 1, "unhealthy": 2}
#: A ping slower than this counts as the backend being down.
PING_TIMEOUT = 5.0
#: /health/ready only reports the broker: a silent one must not outlast a probe's timeout.
READY_BROKER_TIMEOUT = 1.0


def _worst(*statuses: Status) -> Status:
    return max(statuses, key=_RANK.__getitem__)


@dataclass(frozen=True, slots=True)
class Threshold:
    max_waiting: int | None
    max_age: float | None


def threshold_for(settings: Settings, queue: str) -> Threshold:
    """The queue's own threshold where set, else the defaults."""
    own = settings.queue_thresholds.get(queue)
    max_waiting = own.max_waiting if own and own.max_waiting is not None else None
    max_age = own.max_age if own and own.max_age is not None else None
    return Threshold(
        max_waiting if max_waiting is not None else settings.queue_max_waiting,
        max_age if max_age is not None else settings.queue_max_age,
    )


def queue_problems(settings: Settings, snap: QueueSnapshot) -> list[str]:
    problems = []
    for queue, states in sorted(snap.counts.items()):
        limit = threshold_for(settings, queue)
        waiting = states.get("waiting", 0)
        age = snap.oldest_waiting_s.get(queue, 0.0)
        if limit.max_waiting is not None and waiting > limit.max_waiting:
            problems.append(f"queue {queue!r}: {waiting} waiting, over {limit.max_waiting}")
        if limit.max_age is not None and age > limit.max_age:
            problems.append(
                f"queue {queue!r}: oldest waiting job is {age:.0f}s old, over {limit.max_age:g}s"
            )
    return problems


async def _ping(request: Request) -> float:
    """Seconds; raises BackendError (or OSError/TimeoutError) when the backend is down."""
    app = state_of(request).app
    backend = await asyncio.wait_for(app.connect(), PING_TIMEOUT)
    return await asyncio.wait_for(backend.ping(), PING_TIMEOUT)


_DOWN = (BackendError, OSError, TimeoutError)


async def live(request: Request) -> Response:
    return json_response({"status": "alive"})


async def startup(request: Request) -> Response:
    if state_of(request).started:
        return json_response({"status": "started"})
    return json_response({"status": "starting"}, status=503)


async def _broker(request: Request, timeout: float = PING_TIMEOUT) -> BrokerHealth | None:
    """The RabbitMQ broker's answer, when dispatch is configured."""
    probe = state_of(request).broker
    if probe is None:
        return None
    try:
        return await asyncio.wait_for(probe.check(), timeout)
    except TimeoutError:
        return BrokerHealth(False, error=f"broker: no answer within {timeout:g}s")


async def ready(request: Request) -> Response:
    # The broker is reported, not required: enqueue writes only the store, and
    # workers fall back to the store's own wake-up while the broker is down.
    try:
        _, broker = await asyncio.gather(_ping(request), _broker(request, READY_BROKER_TIMEOUT))
    except _DOWN as exc:
        return json_response({"status": "unavailable", "error": str(exc)}, status=503)
    body: dict[str, Any] = {"status": "ready"}
    if broker is not None:
        body["broker"] = broker.to_dict()
    return json_response(body)


async def backend_health(request: Request) -> Response:
    threshold = state_of(request).settings.health_backend_latency
    broker_check = asyncio.ensure_future(_broker(request))
    try:
        latency = await _ping(request)
    except _DOWN as exc:
        body: dict[str, Any] = {"status": "unhealthy", "latency_ms": None, "error": str(exc)}
        status = 503
    else:
        store: Status = "healthy" if latency < threshold else "degraded"
        body = {"status": store, "latency_ms": round(latency * 1000, 3)}
        status = 200
    broker = await broker_check
    if broker is not None:
        body["broker"] = broker.to_dict()
        if not broker.up and status == 200:
            body["status"] = "degraded"  # dispatch falls back to the store's wake-ups
    return json_response(body, status=status)


def _workers(snap: QueueSnapshot) -> dict[str, Any]:
    return {
        info.id: {"alive": alive, "last_seen": info.last_seen, "pid": info.pid, "host": info.host}
        for info, alive in snap.workers
    }


async def queues_health(request: Request) -> Response:
    state = state_of(request)
    try:
        snap = await read_snapshot(state.app)
    except _DOWN as exc:
        body = {"status": "unhealthy", "timestamp": time.time(), "error": str(exc)}
        return json_response(body, status=503)
    problems = queue_problems(state.settings, snap)
    alive = snap.alive_workers
    if alive < state.settings.min_workers:
        problems.append(
            f"{alive} worker(s) alive, fewer than min_workers={state.settings.min_workers}"
        )
    queues = {
        queue: {
            "waiting": states.get("waiting", 0),
            "active": states.get("active", 0),
            "failed": states.get("failed", 0),
            "delayed": states.get("delayed", 0),
            "oldest_waiting_s": round(snap.oldest_waiting_s.get(queue, 0.0), 3),
        }
        for queue, states in sorted(snap.counts.items())
    }
    body = {
        "status": "unhealthy" if problems else "healthy",
        "timestamp": snap.now,
        "queues": queues,
        "workers": _workers(snap),
        "problems": problems,
    }
    return json_response(body, status=503 if problems else 200)


async def overall(request: Request) -> Response:
    """Aggregate: backend (latency), workers (min_workers; none alive while jobs
    wait is degraded), queues (a threshold passed: degraded) and dead letters
    (any: degraded). 200 unless unhealthy (503)."""
    state = state_of(request)
    settings = state.settings
    try:
        latency = await _ping(request)
        snap = await read_snapshot(state.app)
    except _DOWN as exc:
        unknown = {"backend": "unhealthy", "workers": "unknown", "queues": "unknown"}
        unknown["dead_letters"] = "unknown"
        body = {"status": "unhealthy", "checks": unknown, "details": {"error": str(exc)}}
        return json_response(body, status=503)
    backend: Status = "healthy" if latency < settings.health_backend_latency else "degraded"
    alive = snap.alive_workers
    waiting = sum(states.get("waiting", 0) for states in snap.counts.values())
    workers: Status = "healthy"
    if alive < settings.min_workers:
        workers = "unhealthy"
    elif alive == 0 and waiting:
        workers = "degraded"
    problems = queue_problems(settings, snap)
    queues: Status = "degraded" if problems else "healthy"
    dead = {queue: n for queue, n in snap.dead_letters().items() if n}
    dead_letters: Status = "degraded" if dead else "healthy"
    checks: dict[str, Status] = {
        "backend": backend,
        "workers": workers,
        "queues": queues,
        "dead_letters": dead_letters,
    }
    details: dict[str, Any] = {
        "backend": {"latency_ms": round(latency * 1000, 3)},
        "workers": {"alive": alive, "min_workers": settings.min_workers},
        "queues": {"waiting": waiting, "problems": problems},
        "dead_letters": {"total": sum(dead.values()), "by_queue": dead},
    }
    broker = await _broker(request)
    if broker is not None:
        checks["broker"] = "healthy" if broker.up else "degraded"
        details["broker"] = broker.to_dict()
    status = _worst(*checks.values())
    body = {"status": status, "checks": checks, "details": details}
    return json_response(body, status=503 if status == "unhealthy" else 200)


ROUTES = [
    route("/health/live", live, "GET", None),
    route("/health/startup", startup, "GET", None),
    route("/health/ready", ready, "GET", None),
    route("/health/backend", backend_health, "GET", Scope.READ),
    route("/health/queues", queues_health, "GET", Scope.READ),
    route("/health", overall, "GET", Scope.READ),
]

"""One settings object: constructor arguments > ``CONVEYOR_*`` env vars >
``conveyor.toml`` / ``conveyor.yaml`` > defaults.

The file is looked up in the current directory, or named by ``CONVEYOR_CONFIG``.
Durations accept seconds (``1.5``) or strings (``"250ms"``, ``"30s"``, ``"5m"``).
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from conveyor.durations import parse_duration
from conveyor.errors import ConfigurationError
from conveyor.sizes import parse_size

DEFAULT_URL = "sqlite:///./conveyor.db"

Duration = Annotated[float, BeforeValidator(parse_duration)]


def _retention(value: Any) -> int | float | None:
    """A count (an int) or an age (a duration string or float seconds)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    if isinstance(value, bool):
        raise ValueError("expected a count or a duration")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a count cannot be negative")
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return parse_duration(value)


#: ``int`` = keep that many newest; ``float`` = keep that many seconds; ``None`` = keep all.
Retention = Annotated[int | float | None, BeforeValidator(_retention)]


def _optional_duration(value: Any) -> float | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    return parse_duration(value)


OptionalDuration = Annotated[float | None, BeforeValidator(_optional_duration)]


def _optional_size(value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    return parse_size(value)


#: Bytes, or a string like ``"512MB"`` / ``"512MiB"`` (sizes.py); ``None``: no limit.
OptionalSize = Annotated[int | None, BeforeValidator(_optional_size)]


class QueueThreshold(BaseModel):
    """When ``/health/queues`` calls one queue unhealthy (``None``: the default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_waiting: int | None = Field(None, ge=0)
    max_age: OptionalDuration = None


def _config_file(suffixes: tuple[str, ...]) -> Path | None:
    named = os.environ.get("CONVEYOR_CONFIG")
    if named:
        path = Path(named)
        return path if path.suffix in suffixes else None
    for suffix in suffixes:
        path = Path.cwd() / f"conveyor{suffix}"
        if path.is_file():
            return path
    return None


class Settings(BaseSettings):
    """Every tunable of conveyor. Env var = ``CONVEYOR_`` + the key in upper case."""

    model_config = SettingsConfigDict(env_prefix="CONVEYOR_", extra="forbid", frozen=True)

    url: str = DEFAULT_URL
    concurrency: int = Field(50, ge=1)
    lease: Duration = 30.0
    stall_interval: Duration = 30.0
    max_stalled: int = Field(3, ge=0)
    heartbeat_interval: Duration = 10.0
    shutdown_timeout: Duration = 30.0
    default_attempts: int = Field(3, ge=1)
    default_timeout: Duration = 300.0
    backoff_base: Duration = 1.0
    backoff_max: Duration = 3600.0
    backoff_multiplier: float = Field(2.0, ge=1.0)
    idempotency_ttl: Duration = 86400.0
    max_payload_bytes: int = Field(1024 * 1024, ge=1)
    circuit_threshold: int = Field(5, ge=0)
    """0 turns circuit breaking off."""
    circuit_open_for: Duration = 60.0
    keep_completed: Retention = 86400.0
    keep_failed: Retention = 7 * 86400.0
    dispatch: str | None = None
    """A RabbitMQ URL (``amqp://``): the broker carries dispatch, the store keeps
    the state (docs/explanation/rabbitmq.md). ``None``: workers wait on the store."""
    api_tokens: dict[str, list[Literal["read", "enqueue", "admin"]]] = Field(default_factory=dict)

    # Beyond the spec's keys: tuning knobs with safe defaults.
    poll_interval: Duration = 1.0
    """Longest idle wait between claims when no notification arrives."""
    claim_batch: int = Field(200, ge=1)
    """Most jobs one claim takes."""
    prefetch: int | None = Field(None, ge=0)
    """Jobs a worker claims ahead of its free slots (``None``: adaptive, from
    ``concurrency // 2`` to ``2 * concurrency``; 0: claim only into free slots)."""
    cancel_grace: Duration = 5.0
    """After a cancel request, how long a running handler may finish cooperatively."""
    unknown_task_grace: Duration = Field(300.0, ge=0)
    """A worker that does not know a job's task gives the job back (delayed, its
    attempt not counted) until the job is this old, then fails it ``unknown_task``:
    during a rolling deploy, old workers leave new tasks to new workers. 0: fail
    at once."""
    max_worker_rss: OptionalSize = None
    """A worker whose resident memory passes this (bytes, or ``"512MB"``) stops
    claiming, lets its running jobs finish, gives its buffer back and exits
    with code 75, for its supervisor to start a fresh one (``None``: no limit)."""
    worker_queue_ttl: Duration = 300.0
    cleanup_interval: Duration = 60.0
    sqlite_synchronous: Literal["OFF", "NORMAL", "FULL", "EXTRA"] = "NORMAL"
    sqlite_busy_timeout: Duration = 30.0
    sqlite_file_mode: str = Field("0600", pattern=r"^0?[0-7]{3}$")
    """Permissions (octal) of a SQLite database file conveyor creates, and so of
    its -wal and -shm files: by default only its owner may read it."""

    otel_parent: Literal["parent", "link"] = "parent"
    """With OpenTelemetry tracing on: a job's CONSUMER span is a child of the
    span that enqueued it (``parent``), or a new trace linked to it (``link``)."""

    # The HTTP service (``conveyor serve``) and the metrics it reads.
    min_workers: int = Field(0, ge=0)
    """``/health/queues`` is 503 while fewer workers than this are alive."""
    queue_max_waiting: int | None = Field(None, ge=0)
    """Default waiting-count threshold of every queue (``None``: no threshold)."""
    queue_max_age: OptionalDuration = None
    """Default threshold on the age of a queue's oldest due waiting job."""
    queue_thresholds: dict[str, QueueThreshold] = Field(default_factory=dict)
    """Per-queue overrides: ``{"emails": {"max_waiting": 5000, "max_age": "10m"}}``."""
    max_request_bytes: int = Field(2 * 1024 * 1024, ge=1)
    """Largest HTTP request body the service reads; larger ones get 413."""
    request_read_timeout: Duration = 30.0
    """Longest wait for the next part of a request body; a slower client gets 408."""
    max_connections: int = Field(1000, ge=1)
    """Connections and requests ``conveyor serve`` handles at once; more get 503."""
    auth_free_failures: int = Field(5, ge=1)
    """Wrong tokens one client address may present before it is slowed down."""
    auth_lockout: Duration = 1.0
    """The first wait after those; it doubles with each further wrong token (up to 5m)."""
    session_idle_timeout: Duration = 8 * 3600.0
    """A dashboard session ends after this long without a request."""
    session_max_age: Duration = 7 * 86400.0
    """A dashboard session ends this long after its sign-in, used or not."""
    health_backend_latency: Duration = 0.1
    """``/health/backend`` is degraded when a ping takes longer than this."""
    stats_flush_interval: Duration = 5.0
    """How often a worker stores the counts and durations of its finished runs."""
    stats_retention: Duration = 2 * 86400.0
    """Per-minute job statistics older than this are pruned (totals are kept)."""

    @field_validator("url")
    @classmethod
    def _url_has_scheme(cls, value: str) -> str:
        if "://" not in value:
            raise ValueError("a backend URL looks like sqlite:///./conveyor.db or memory://")
        return value

    @field_validator("dispatch")
    @classmethod
    def _dispatch_is_amqp(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            return None
        if value is not None and value.split("://", 1)[0].lower() not in ("amqp", "amqps"):
            raise ValueError("a dispatch URL looks like amqp://guest:guest@127.0.0.1:5672/%2F")
        return value

    @field_validator("sqlite_synchronous", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml_file = _config_file((".toml",))
        if toml_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        yaml_file = _config_file((".yaml", ".yml"))
        if yaml_file:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file))
        return tuple(sources)


def load_settings(**overrides: Any) -> Settings:
    """Build :class:`Settings`; invalid values raise :class:`ConfigurationError` naming
    the key, where its value came from (``CONVEYOR_LEASE``, the file), what is wrong
    with it and what is expected."""
    clean = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**clean)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = ".".join(str(part) for part in err["loc"]) or "settings"
            top = str(err["loc"][0]) if err["loc"] else ""
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "not a conveyor setting"
            value = err.get("input")
            shown = repr(value)
            if isinstance(value, str | int | float) and shown not in message:
                message = f"{shown}: {message}"
            problems.append(f"{key}{_origin(top, clean)}: {message}")
        raise ConfigurationError("invalid configuration: " + "; ".join(problems)) from None
    except SettingsError as exc:  # a JSON-valued setting whose text is not JSON
        found = re.search(r'field "(\w+)"', str(exc))
        key = found.group(1) if found else "settings"
        raw = os.environ.get(f"CONVEYOR_{key.upper()}")
        got = f"{raw!r} is not JSON" if raw is not None else "not JSON"
        example = JSON_EXAMPLES.get(key, "a JSON value")
        raise ConfigurationError(
            f"invalid configuration: {key}{_origin(key, clean)}: {got}; expected {example}"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(
            f"invalid configuration: {_config_file(('.toml',))} is not valid TOML: {exc}"
        ) from None


#: The expected form of the settings given as JSON in an environment variable.
JSON_EXAMPLES = {
    "api_tokens": 'a JSON object of token to scopes, like {"<token>": ["read", "enqueue"]}',
    "queue_thresholds": 'a JSON object, like {"emails": {"max_waiting": 5000, "max_age": "10m"}}',
}


def _origin(key: str, overrides: dict[str, Any]) -> str:
    """`` (CONVEYOR_KEY)`` or `` (in conveyor.toml)`` when the value came from there."""
    if not key or key in overrides:
        return ""
    env = f"CONVEYOR_{key.upper()}"
    if any(name.upper() == env for name in os.environ):
        return f" ({env})"
    for suffixes in ((".toml",), (".yaml", ".yml")):
        path = _config_file(suffixes)
        if path is not None:
            return f" (in {path.name})"
    return ""

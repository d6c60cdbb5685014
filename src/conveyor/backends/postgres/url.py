"""``postgresql://user:pass@host:port/db?schema=name`` URLs and their options.

conveyor's own options are taken out of the query string; everything else
(``sslmode``, ``application_name``, ...) goes to asyncpg as libpq would read it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from conveyor.durations import parse_duration
from conveyor.errors import ConfigurationError

#: A schema name conveyor accepts: a plain lower-case identifier. The
#: notification channel is ``<schema>_work``, which must fit PostgreSQL's 63 bytes.
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,57}$")

DEFAULT_SCHEMA = "conveyor"


@dataclass(frozen=True, slots=True)
class PostgresOptions:
    dsn: str
    """The URL asyncpg connects with (conveyor's options removed)."""
    schema: str
    pool_size: int
    """Most connections the pool holds."""
    connect_timeout: float
    """Seconds to open a connection or to get one from the pool."""
    command_timeout: float
    """Seconds any one statement may take before BackendUnavailable."""

    @property
    def quoted_schema(self) -> str:
        return f'"{self.schema}"'

    @property
    def channel(self) -> str:
        """The LISTEN/NOTIFY channel of this schema (payload: a queue name)."""
        return f"{self.schema}_work"


def validate_schema(name: str) -> str:
    if not _SCHEMA.match(name):
        raise ConfigurationError(
            f"url: schema={name!r} is not a valid schema name (lower-case letters, digits "
            "and _, starting with a letter or _, at most 58 characters)"
        )
    return name


def _positive(key: str, value: str, parse: type[int] | type[float]) -> float:
    try:
        number = parse_duration(value) if parse is float else int(value)
    except ValueError:
        raise ConfigurationError(f"url: {key}={value!r} is not a valid number") from None
    if number <= 0:
        raise ConfigurationError(f"url: {key}={value!r} must be positive")
    return number


def parse_url(url: str) -> PostgresOptions:
    """Options for ``url``. Raises :class:`ConfigurationError` naming the problem."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("postgresql", "postgres"):
        raise ConfigurationError(f"url: {url!r} is not a postgresql:// URL")
    schema = DEFAULT_SCHEMA
    pool_size = 10
    connect_timeout = 5.0
    command_timeout = 30.0
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "schema":
            schema = validate_schema(value)
        elif key == "pool_size":
            pool_size = int(_positive(key, value, int))
        elif key == "connect_timeout":
            connect_timeout = float(_positive(key, value, float))
        elif key == "command_timeout":
            command_timeout = float(_positive(key, value, float))
        else:
            rest.append((key, value))
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(rest), parts.fragment))
    return PostgresOptions(
        dsn=dsn,
        schema=schema,
        pool_size=pool_size,
        connect_timeout=connect_timeout,
        command_timeout=command_timeout,
    )

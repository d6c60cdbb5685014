"""``redis://`` / ``rediss://`` URLs: conveyor's own options, the rest for redis-py.

Conveyor's options (removed before redis-py sees the URL):

- ``prefix=NAME``: the app's key namespace (default ``default``); keys are
  ``{conveyor:NAME}:...``, one cluster hash slot per app;
- ``cluster=true``: connect with redis-py's ``RedisCluster`` (the host:port is
  any node of the cluster);
- ``maxmemory_check=warn|refuse|off``: what to do at open when the server's
  ``maxmemory-policy`` is not ``noeviction`` (default ``warn``);
- ``wait_replicas=N`` / ``wait_timeout=DURATION``: after each enqueue, ``WAIT``
  for N replicas (default timeout 1s) and raise :class:`NotReplicated` when fewer
  acknowledged;
- ``socket_timeout=DURATION`` / ``connect_timeout=DURATION``: how long one call
  may wait on the network before :class:`BackendUnavailable` (default 5s / 2s).

redis-py's ``db``, ``client_name``, ``health_check_interval``, ``max_connections``,
``socket_keepalive``, ``socket_read_size`` and ``ssl_*`` options pass through; any
other option is refused with :class:`ConfigurationError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from conveyor.durations import parse_duration
from conveyor.errors import ConfigurationError

MaxmemoryCheck = Literal["warn", "refuse", "off"]
_CHECKS = ("warn", "refuse", "off")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
_OWN_OPTIONS = (
    "prefix",
    "cluster",
    "maxmemory_check",
    "wait_replicas",
    "wait_timeout",
    "socket_timeout",
    "connect_timeout",
)
#: redis-py's own URL options that conveyor passes through.
_CLIENT_OPTIONS = (
    "db",
    "client_name",
    "health_check_interval",
    "max_connections",
    "socket_keepalive",
    "socket_read_size",
)


@dataclass(frozen=True, slots=True)
class RedisOptions:
    client_url: str
    """The URL redis-py is given (conveyor's options removed)."""
    prefix: str
    cluster: bool = False
    maxmemory_check: MaxmemoryCheck = "warn"
    wait_replicas: int = 0
    wait_timeout: float = 1.0
    socket_timeout: float = 5.0
    connect_timeout: float = 2.0


def _duration(name: str, value: str) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise ConfigurationError(f"url: {name}: {exc}") from None
    if seconds <= 0:
        raise ConfigurationError(f"url: {name} must be positive, not {value!r}")
    return seconds


def _check_prefix(prefix: str) -> str:
    if not prefix or any(c in prefix for c in "{}") or any(c.isspace() for c in prefix):
        raise ConfigurationError(
            f"url: prefix={prefix!r} must be non-empty, without braces or spaces "
            "(it becomes the keys' cluster hash tag)"
        )
    return prefix


def parse_url(url: str) -> RedisOptions:
    """Options for ``url``. Raises :class:`ConfigurationError` naming the problem."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("redis", "rediss"):
        raise ConfigurationError(f"url: {url!r} is not a redis:// or rediss:// URL")
    prefix = "default"
    cluster = False
    check: str = "warn"
    wait_replicas = 0
    wait_timeout = 1.0
    socket_timeout = 5.0
    connect_timeout = 2.0
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "prefix":
            prefix = _check_prefix(value)
        elif key == "cluster":
            if value.lower() not in _TRUE + _FALSE:
                raise ConfigurationError(f"url: cluster={value!r} is not true or false")
            cluster = value.lower() in _TRUE
        elif key == "maxmemory_check":
            check = value.lower()
            if check not in _CHECKS:
                raise ConfigurationError(
                    f"url: maxmemory_check={value!r} is not one of {', '.join(_CHECKS)}"
                )
        elif key == "wait_replicas":
            try:
                wait_replicas = int(value)
            except ValueError:
                raise ConfigurationError(f"url: wait_replicas={value!r} is not a number") from None
            if wait_replicas < 0:
                raise ConfigurationError(f"url: wait_replicas={value!r} must be 0 or more")
        elif key == "wait_timeout":
            wait_timeout = _duration(key, value)
        elif key == "socket_timeout":
            socket_timeout = _duration(key, value)
        elif key in ("connect_timeout", "socket_connect_timeout"):
            connect_timeout = _duration(key, value)
        elif key in _CLIENT_OPTIONS or key.startswith("ssl_"):
            rest.append((key, value))
        else:
            known = ", ".join(sorted({*_OWN_OPTIONS, *_CLIENT_OPTIONS, "ssl_*"}))
            raise ConfigurationError(f"url: unknown Redis option {key!r} (known: {known})")
    if cluster and wait_replicas:
        raise ConfigurationError(
            "url: wait_replicas is not supported with cluster=true (WAIT needs the "
            "connection that wrote; a cluster routes each call by key)"
        )
    if cluster and parts.path.strip("/") not in ("", "0"):
        raise ConfigurationError("url: a Redis Cluster has only database 0")
    client_url = urlunsplit((scheme, parts.netloc, parts.path, urlencode(rest), ""))
    return RedisOptions(
        client_url=client_url,
        prefix=prefix,
        cluster=cluster,
        maxmemory_check=cast(MaxmemoryCheck, check),
        wait_replicas=wait_replicas,
        wait_timeout=wait_timeout,
        socket_timeout=socket_timeout,
        connect_timeout=connect_timeout,
    )

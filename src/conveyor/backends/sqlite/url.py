"""``sqlite:///relative.db`` / ``sqlite:////absolute.db`` URLs and their options."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast
from urllib.parse import parse_qsl, unquote, urlsplit

from conveyor.durations import parse_duration
from conveyor.errors import ConfigurationError
from conveyor.settings import Settings, load_settings

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


@dataclass(frozen=True, slots=True)
class SQLiteOptions:
    path: Path
    """Absolute path of the database file."""
    synchronous: Synchronous
    busy_timeout: float
    """Seconds a write may wait for the lock before BackendUnavailable."""
    file_mode: int = 0o600
    """Permissions of a database file this backend creates (SQLite gives its
    -wal and -shm files the same)."""


def parse_file_mode(value: str) -> int:
    """``"0600"`` / ``"640"`` -> the mode; raises ``ValueError`` for anything else."""
    mode = int(value, 8)
    if not 0 <= mode <= 0o777:
        raise ValueError(f"{value!r} is not a file mode such as 0600")
    return mode


def parse_url(url: str, settings: Settings | None = None) -> SQLiteOptions:
    """Options for ``url``; its query string (``?synchronous=FULL&busy_timeout=5``)
    overrides ``settings``. Raises :class:`ConfigurationError` naming the problem."""
    defaults = settings if settings is not None else load_settings()
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite":
        raise ConfigurationError(f"url: {url!r} is not a sqlite:// URL")
    if parts.netloc:
        raise ConfigurationError(
            f"url: {url!r} names a host ({parts.netloc!r}); SQLite URLs have none: "
            "use sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    # "sqlite:///x.db" has path "/x.db" (relative x.db); "sqlite:////x.db" has "//x.db".
    raw = unquote(parts.path)
    if not raw.startswith("/") or raw in ("/", "//"):
        raise ConfigurationError(
            f"url: {url!r} has no database file; use sqlite:///relative/path.db "
            "or sqlite:////absolute/path.db"
        )
    name = raw[1:]
    if name == ":memory:" or name.startswith("file:"):
        raise ConfigurationError(
            f"url: {url!r}: the SQLite backend needs a file (workers share it); "
            "use memory:// for an in-process backend"
        )
    if name.endswith("/") or name.endswith(os.sep):
        raise ConfigurationError(f"url: {url!r} names a folder, not a database file")
    path = Path(name)
    if not path.is_absolute():
        path = Path.cwd() / path

    synchronous: str = defaults.sqlite_synchronous
    busy_timeout = float(defaults.sqlite_busy_timeout)
    file_mode = parse_file_mode(defaults.sqlite_file_mode)
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "synchronous":
            synchronous = value.upper()
            if synchronous not in _SYNCHRONOUS:
                raise ConfigurationError(
                    f"url: synchronous={value!r} is not one of {', '.join(_SYNCHRONOUS)}"
                )
        elif key == "busy_timeout":
            try:
                busy_timeout = parse_duration(value)
            except ValueError as exc:
                raise ConfigurationError(f"url: busy_timeout: {exc}") from None
        elif key == "file_mode":
            try:
                file_mode = parse_file_mode(value)
            except ValueError:
                raise ConfigurationError(
                    f"url: file_mode={value!r} is not an octal file mode such as 0600"
                ) from None
        else:
            raise ConfigurationError(
                f"url: unknown SQLite option {key!r} (known: synchronous, busy_timeout, file_mode)"
            )
    return SQLiteOptions(
        path=path,
        synchronous=cast(Synchronous, synchronous),
        busy_timeout=busy_timeout,
        file_mode=file_mode,
    )

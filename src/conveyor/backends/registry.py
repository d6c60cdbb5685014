"""URL -> backend. Each backend module is imported only when its scheme is used."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from conveyor.backends.base import Backend
from conveyor.errors import ConfigurationError, MissingDependency

if TYPE_CHECKING:
    from conveyor.settings import Settings

# scheme -> (module, class, pip extra that installs its driver or None)
_BACKENDS: dict[str, tuple[str, str, str | None]] = {
    "memory": ("conveyor.backends.memory", "MemoryBackend", None),
    "sqlite": ("conveyor.backends.sqlite", "SQLiteBackend", None),
    "postgresql": ("conveyor.backends.postgres", "PostgresBackend", "postgres"),
    "postgres": ("conveyor.backends.postgres", "PostgresBackend", "postgres"),
    "redis": ("conveyor.backends.redis", "RedisBackend", "redis"),
    "rediss": ("conveyor.backends.redis", "RedisBackend", "redis"),
}


def scheme_of(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise ConfigurationError(
            f"url: {url!r} is not a backend URL (like sqlite:///./conveyor.db)"
        )
    return scheme.lower()


def backend_from_url(url: str, settings: Settings | None = None) -> Backend:
    """Build (not open) the backend for ``url``; it reads its tunables from ``settings``."""
    scheme = scheme_of(url)
    if scheme not in _BACKENDS:
        known = ", ".join(sorted(_BACKENDS))
        raise ConfigurationError(f"url: unknown backend scheme {scheme!r} (known: {known})")
    module_name, class_name, extra = _BACKENDS[scheme]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("conveyor"):
            raise ConfigurationError(f"url: the {scheme} backend is not available yet") from exc
        hint = f"pip install 'conveyor[{extra}]'" if extra else "reinstall conveyor"
        raise MissingDependency(f"the {scheme} backend needs {exc.name}: {hint}") from exc
    backend_cls: type[Backend] = getattr(module, class_name)
    return backend_cls(url, settings)  # type: ignore[call-arg]  # every backend takes (url, settings)

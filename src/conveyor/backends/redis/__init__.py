"""The Redis backend (``redis://host:6379/0?prefix=myapp``, ``rediss://``,
``...?cluster=true``). See :mod:`conveyor.backends.redis.backend` and
docs/explanation/redis.md.
"""

from __future__ import annotations

from conveyor.backends.redis.backend import RedisBackend

__all__ = ["RedisBackend"]

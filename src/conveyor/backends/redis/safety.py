"""Checks that keep Redis from silently losing jobs.

- ``maxmemory-policy``: any policy but ``noeviction`` lets Redis delete keys
  (job hashes, queue indexes) when memory runs out. At open we read it and warn
  loudly, or refuse with :class:`ConfigurationError` under
  ``maxmemory_check=refuse``.
- ``WAIT`` mode (``wait_replicas=N``): an enqueue is acknowledged only once N
  replicas have it; fewer within ``wait_timeout`` raises :class:`NotReplicated`.
"""

from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import ResponseError

from conveyor.backends.redis.url import MaxmemoryCheck
from conveyor.errors import ConfigurationError

logger = logging.getLogger("conveyor.backends.redis")

SAFE_POLICY = "noeviction"


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def read_maxmemory_policy(client: Any) -> str | None:
    """The server's ``maxmemory-policy``, or ``None`` when CONFIG is not allowed
    (managed services often rename or forbid it)."""
    try:
        reply = await client.config_get("maxmemory-policy")
    except ResponseError:
        return None
    if isinstance(reply, dict):
        for key, value in reply.items():
            if _decode(key) == "maxmemory-policy":
                return _decode(value)
    return None


def check_maxmemory_policy(policy: str | None, mode: MaxmemoryCheck, where: str) -> None:
    """Warn or refuse when ``policy`` lets Redis evict keys."""
    if mode == "off" or policy == SAFE_POLICY:
        return
    if policy is None:
        logger.warning(
            "%s: could not read maxmemory-policy (CONFIG GET refused); make sure it is "
            "'noeviction', or Redis may delete jobs when it runs out of memory",
            where,
        )
        return
    message = (
        f"{where}: Redis maxmemory-policy is {policy!r}, not 'noeviction': when memory "
        "runs out Redis will EVICT KEYS and silently lose jobs and queue indexes. "
        "Set 'maxmemory-policy noeviction' (enqueues then fail with an error instead)"
    )
    if mode == "refuse":
        raise ConfigurationError(message + " (refused: maxmemory_check=refuse)")
    logger.warning("%s (or add maxmemory_check=refuse to the URL to refuse to start)", message)

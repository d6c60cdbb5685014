"""Recycles a worker whose memory grew past ``max_worker_rss``.

A leaking handler (or a library's cache) makes a long-lived worker grow until
the kernel's OOM killer ends it mid-job. The watch reads the process's
resident set size every few seconds from ``/proc/self/statm`` (one small read,
no dependency); past the limit it logs a WARNING and begins the graceful
shutdown: no more claims, the buffer given back, running jobs finish within
``shutdown_timeout`` (or are released). The worker then reports
:attr:`MemoryWatch.exceeded` and ``conveyor worker`` exits with
:data:`RECYCLE_EXIT`, which the supervisor (``--processes N``) answers with a
fresh process at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

from conveyor.sizes import format_size

logger = logging.getLogger("conveyor.worker")

#: ``conveyor worker``'s exit code after a recycle (EX_TEMPFAIL: start it again).
RECYCLE_EXIT = 75
#: Seconds between two reads of the resident set size.
CHECK_INTERVAL = 2.0
_STATM = "/proc/self/statm"


def resident_bytes() -> int | None:
    """This process's resident set size now, or None where /proc is missing."""
    try:
        with open(_STATM, "rb") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


class MemoryWatch:
    def __init__(
        self, limit: int, stop: Callable[[], None], interval: float = CHECK_INTERVAL
    ) -> None:
        self.limit = limit
        self.interval = interval
        self._stop = stop
        #: The resident size that passed the limit (bytes), once it did.
        self.exceeded: int | None = None

    async def run(self) -> None:
        """Check until the limit is passed (then stop the worker) or /proc is missing."""
        if resident_bytes() is None:
            logger.warning(
                "max_worker_rss is set but %s cannot be read on this system: not enforced",
                _STATM,
            )
            return
        while True:
            await asyncio.sleep(self.interval)
            rss = resident_bytes()
            if rss is not None and rss > self.limit:
                self.exceeded = rss
                logger.warning(
                    "worker memory %s is past max_worker_rss %s: stopping claims, "
                    "finishing running jobs, then exiting to be replaced",
                    format_size(rss),
                    format_size(self.limit),
                )
                self._stop()
                return

"""Direct handoff: jobs a claim hands to an idle worker's inbox list.

A claim with ``handoff_for`` registers the worker as idle; scripts that make
work due claim it for that worker and push it, as a lease group, to
``inbox:<worker>``. :meth:`Handoffs.next` pops the inbox on a connection of the
worker's own (a blocking pop would hold a shared one); :meth:`Handoffs.end`
ends the registration, returns the jobs still in the inbox and pushes an empty
item that ends the pop (``handoff-end-1.lua``).
"""

from __future__ import annotations

import logging
import time

import msgpack

from conveyor.backends import base
from conveyor.backends.redis import decode
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.direct import DirectConnections

logger = logging.getLogger("conveyor.backends.redis")


class Handoffs:
    """The inboxes this backend instance pops, one connection per worker."""

    def __init__(self, conn: RedisConnection) -> None:
        self._conn = conn
        #: Per worker: the connection that pops its inbox; the workers this
        #: backend ended (end), and those whose end marker came.
        self.inboxes: dict[str, DirectConnections] = {}
        self._ending: set[str] = set()
        self._ended: set[str] = set()

    async def next(self, worker_id: str, timeout: float) -> list[base.Handoff] | None:
        conn = self._conn
        conn.ready()
        if worker_id in self._ended:
            await self._close_inbox(worker_id)
            return None
        inbox = self.inboxes.get(worker_id)
        if inbox is None:
            inbox = self.inboxes[worker_id] = conn.make_direct(conn.slot_url())
        key = conn.keys.inbox(worker_id)
        try:
            async with conn.errors("handoff", blocking=timeout):
                # The server's clock before the pop, read in the same trip: a
                # lease that started `at` began no earlier, locally, than
                # sent + (at - before), the way a claim's lease counts from
                # when the claim was sent.
                sent = time.monotonic()
                (seconds, micros), popped = await inbox.pipeline(
                    [("TIME",), ("BLMPOP", timeout, 1, key, "LEFT", "COUNT", 10_000)]
                )
        except BaseException:
            # A new connection next time (on a cluster: to the slot's node now).
            await self._drop_inbox(worker_id)
            raise
        if popped is None:
            return []
        before = int(seconds) + int(micros) / 1_000_000
        handed: list[base.Handoff] = []
        for packed in popped[1]:
            if not packed:
                if worker_id in self._ending:
                    # end: what came before it is still delivered.
                    self._ended.add(worker_id)
                    break
                continue  # an earlier process's, with the same worker id
            try:
                at, groups, expired = msgpack.unpackb(packed, raw=True)
                result = decode.leased_result(groups, expired)
            except (ValueError, TypeError) as exc:
                # Not this version's format (another build on the same prefix):
                # its jobs stay active under their lease until stall recovery.
                logger.warning("skipped a handoff this worker cannot read: %r", exc)
                continue
            handed.append(base.Handoff(result, sent + (float(at) - before)))
        if not handed and worker_id in self._ended:
            await self._close_inbox(worker_id)
            return None
        return handed

    async def end(self, worker_id: str, lease: float) -> base.ClaimResult:
        self._ending.add(worker_id)
        conn = self._conn
        packed = await conn.run("handoff-end", [conn.keys.active], [worker_id, lease])
        return decode.claim_result(packed)

    async def close(self) -> None:
        inboxes, self.inboxes = self.inboxes, {}
        for inbox in inboxes.values():
            await inbox.close()

    async def _close_inbox(self, worker_id: str) -> None:
        self._ended.discard(worker_id)
        self._ending.discard(worker_id)
        await self._drop_inbox(worker_id)

    async def _drop_inbox(self, worker_id: str) -> None:
        inbox = self.inboxes.pop(worker_id, None)
        if inbox is not None:
            await inbox.close()

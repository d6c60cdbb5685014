"""Claims that outlive a cancelled caller, and the jobs they would orphan.

A worker may be cancelled (shutdown, timeout) while its claim is in flight. The
claim's transaction or script may still commit, handing jobs to nobody: they
would wait out their lease and come back as stalled, with an attempt spent.
:class:`ClaimKeeper` runs each claim shielded from the caller's cancellation;
when the caller is gone and the claim commits anyway, it gives those jobs back
at once (``RELEASE``: waiting again, attempt returned). A backend's ``close``
awaits :meth:`ClaimKeeper.wait` first, so nothing is left half done.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from conveyor.backends.base import ClaimResult, Outcome, Settlement
from conveyor.errors import BackendError

logger = logging.getLogger("conveyor.backends")

T = TypeVar("T")


def _itself(result: ClaimResult) -> ClaimResult:
    return result


class ClaimKeeper:
    def __init__(
        self,
        release: Callable[[Sequence[Settlement]], Awaitable[object]],
        is_open: Callable[[], bool],
    ) -> None:
        self._release = release
        self._is_open = is_open
        self._in_flight: set[asyncio.Future[Any]] = set()

    async def run(self, claim: Awaitable[ClaimResult]) -> ClaimResult:
        """The claim's result; if the caller is cancelled meanwhile, the claim
        goes on and whatever it claimed is released."""
        return await self.run_part(claim, _itself)

    async def run_part(self, call: Awaitable[T], claimed: Callable[[T], ClaimResult]) -> T:
        """:meth:`run` for a call whose answer holds a claim (``claimed`` finds
        it: settle_and_claim's)."""
        future = asyncio.ensure_future(call)
        self._track(future)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(lambda done: self._give_back(done, claimed))
            raise

    async def wait(self) -> None:
        """Until every claim in flight and every release it caused is done."""
        while self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)
            await asyncio.sleep(0)  # let their done-callbacks run

    def _track(self, future: asyncio.Future[Any]) -> None:
        self._in_flight.add(future)
        future.add_done_callback(self._in_flight.discard)

    def _give_back(self, call: asyncio.Future[T], claimed: Callable[[T], ClaimResult]) -> None:
        if call.cancelled() or call.exception() is not None:
            return
        jobs = claimed(call.result()).jobs
        if not jobs or not self._is_open():
            return
        settlements = [
            Settlement(job.id, job.lease_token or "", Outcome.RELEASE, task=job.task)
            for job in jobs
        ]
        self._track(asyncio.get_running_loop().create_task(self._release_quietly(settlements)))

    async def _release_quietly(self, settlements: list[Settlement]) -> None:
        try:
            await self._release(settlements)
        except BackendError as exc:  # they will stall and be recovered instead
            logger.warning("could not release %d orphaned claimed jobs: %s", len(settlements), exc)

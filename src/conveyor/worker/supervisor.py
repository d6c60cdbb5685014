"""Runs N worker processes and keeps them running (``conveyor worker --processes N``).

Each child is the same ``conveyor worker`` command without ``--processes``, in
its own process group so that a terminal's Ctrl-C reaches only the supervisor,
which forwards it: one signal, one graceful stop per child. A child that dies
while no stop was asked for is restarted after a backoff (1 s, doubling up to
30 s, reset once a child has run for a while); one that exits with code 75
(:data:`~conveyor.worker.memory.RECYCLE_EXIT`: it passed ``max_worker_rss``
and stopped cleanly) is replaced at once. The first SIGTERM/SIGINT is
forwarded to every child; a second one, or ``shutdown_timeout`` + 10 s
without every child gone, kills them (SIGKILL). The supervisor exits when all
children have exited: 0 after a clean stop (or, with ``--burst``, once every
child finished its burst), 1 when children had to be killed or failed.

Children watch the supervisor's pid (``--supervisor-pid``) and stop by
themselves if it disappears, so a killed supervisor leaves no orphans working.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Sequence

from conveyor.durations import format_duration
from conveyor.worker.memory import RECYCLE_EXIT

logger = logging.getLogger("conveyor.supervisor")

#: A child exiting with this code soon after its start was refused its arguments
#: or configuration: restarting it cannot help. Later, the same code is just a
#: crash (a handler may call ``sys.exit(2)``), and the child is restarted.
USAGE_EXIT = 2
STARTUP_WINDOW = 5.0
#: A child that ran this long before dying starts the backoff over.
HEALTHY_RUN = 30.0
KILL_GRACE = 10.0


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class Supervisor:
    def __init__(
        self,
        command: Sequence[str],
        processes: int,
        *,
        shutdown_timeout: float,
        burst: bool = False,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
        on_child_exit: Callable[[int], None] | None = None,
    ) -> None:
        if processes < 1:
            raise ValueError("processes must be >= 1")
        self.command = list(command)
        self.processes = processes
        self.shutdown_timeout = shutdown_timeout
        self.burst = burst
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.children: dict[int, asyncio.subprocess.Process] = {}
        self._signals = 0
        self._stopping = asyncio.Event()
        self._kill_timer: asyncio.TimerHandle | None = None
        self._killed = False
        self._failed = False
        self._on_child_exit = on_child_exit

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def run(self) -> int:
        """Run until every child has exited after a stop (or its burst); the exit code."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        logger.info("supervisor starting %d worker processes", self.processes)
        try:
            await asyncio.gather(*(self._keep(slot) for slot in range(1, self.processes + 1)))
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            if self._kill_timer is not None:
                self._kill_timer.cancel()
        clean = not (self._killed or self._failed)
        logger.info("supervisor: all workers exited%s", "" if clean else " (not cleanly)")
        return 0 if clean else 1

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Forward ``sig`` to every child; kill them if they outlast the deadline."""
        if self.stopping:
            return
        self._stopping.set()
        for proc in self.children.values():
            _send(proc, sig)
        deadline = self.shutdown_timeout + KILL_GRACE
        self._kill_timer = asyncio.get_running_loop().call_later(
            deadline, self.kill, f"workers still running {format_duration(deadline)} after stop"
        )

    def kill(self, why: str) -> None:
        if self.children:
            logger.warning("%s: killing %d worker(s)", why, len(self.children))
            self._killed = True
        for proc in self.children.values():
            _send(proc, signal.SIGKILL)

    def _on_signal(self, sig: signal.Signals) -> None:
        self._signals += 1
        if self._signals == 1:
            logger.info(
                "%s received: stopping %d worker(s) (signal again to force)",
                sig.name,
                len(self.children),
            )
            self.stop(sig)
        else:
            self.kill("second signal")

    async def _keep(self, slot: int) -> None:
        """Run the child of one slot, restarting it while no stop was asked for."""
        loop = asyncio.get_running_loop()
        failures = 0
        while not self.stopping:
            started = loop.time()
            proc = await asyncio.create_subprocess_exec(*self.command, process_group=0)
            self.children[slot] = proc
            if self.stopping:  # a signal came while the child was being spawned
                _send(proc, signal.SIGTERM)
            logger.info("worker %d started (pid %d)", slot, proc.pid)
            code = await proc.wait()
            del self.children[slot]
            if self._on_child_exit is not None:
                self._on_child_exit(proc.pid)
            ran = loop.time() - started
            if self.stopping:
                if code not in (0, RECYCLE_EXIT, -signal.SIGTERM, -signal.SIGINT, -signal.SIGKILL):
                    self._failed = True
                logger.info("worker %d (pid %d) %s", slot, proc.pid, describe_exit(code))
                return
            if code == RECYCLE_EXIT:  # past max_worker_rss, after a clean stop
                logger.info(
                    "worker %d (pid %d) exited to be recycled (max_worker_rss); "
                    "starting a fresh one",
                    slot,
                    proc.pid,
                )
                failures = 0
                continue
            if self.burst and code == 0:
                logger.info("worker %d (pid %d) finished its burst", slot, proc.pid)
                return
            if code == USAGE_EXIT and ran < STARTUP_WINDOW:
                logger.error(
                    "worker %d (pid %d) %s: bad arguments or configuration; stopping",
                    slot,
                    proc.pid,
                    describe_exit(code),
                )
                self._failed = True
                self.stop()
                return
            failures = 1 if ran >= HEALTHY_RUN else failures + 1
            delay = min(self.backoff_max, self.backoff_base * 2 ** (failures - 1))
            logger.warning(
                "worker %d (pid %d) %s after %s; restarting it in %s",
                slot,
                proc.pid,
                describe_exit(code),
                format_duration(ran),
                format_duration(delay),
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)


def _send(proc: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)

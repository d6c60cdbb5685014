"""How a peer's worker tells the benchmark what happened, the same way for every peer.

The tasks of every peer app call these functions; each appends one short line to
the file ``BENCH_RECORD`` names (``O_APPEND``: one ``write`` per line, so lines
from threads, worker processes and forked children never interleave):

- ``s <time>``: the first job a process starts (once per process, forks included);
- ``d <time>``: a job's handler finished;
- ``p <i> <time>``: W2's stamp job ``i`` started.

Times are ``time.time()``. One ``write(2)`` per job costs a few microseconds,
well under 1% of the fastest peer's per-job cost. :class:`Record` is the
benchmark process's reader.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_fd: int | None = None
_pid: int | None = None
_started = False


def _write(line: str) -> None:
    global _fd, _pid, _started
    pid = os.getpid()
    if pid != _pid:  # first use in this process (or in a fork): own descriptor
        path = os.environ["BENCH_RECORD"]
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _pid = pid
        _started = False
    assert _fd is not None
    os.write(_fd, line.encode())


def started() -> None:
    """A handler starts: the first one in this process is recorded."""
    global _started
    if not _started or _pid != os.getpid():
        _write(f"s {time.time()!r}\n")  # resets _started in a new process
        _started = True


def done() -> None:
    _write(f"d {time.time()!r}\n")


def noop() -> None:
    """W1's whole job."""
    started()
    done()


def stamp(i: int) -> None:
    """W2: the moment the handler starts."""
    _write(f"p {i} {time.time()!r}\n")


class Record:
    """The benchmark's side: reads the lines as they arrive."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.done = 0
        self.first_start: float | None = None
        self.last_done = 0.0
        self.stamps: dict[int, float] = {}

    def poll(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            kind, _, rest = line.decode().partition(" ")
            if kind == "d":
                self.done += 1
                self.last_done = max(self.last_done, float(rest))
            elif kind == "s":
                at = float(rest)
                self.first_start = at if self.first_start is None else min(self.first_start, at)
            elif kind == "p":
                i, _, stamped = rest.partition(" ")
                self.stamps[int(i)] = float(stamped)

    def window(self) -> float:
        if self.first_start is None:
            raise RuntimeError("no job started")
        return self.last_done - self.first_start

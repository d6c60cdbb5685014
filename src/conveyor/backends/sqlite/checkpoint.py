"""WAL checkpoints off the writer's hot path.

In WAL mode every commit appends pages to ``jobs.db-wal``; a *checkpoint*
copies them back into ``jobs.db`` (and, with ``synchronous`` above OFF, syncs
both files). SQLite's default runs it inside the COMMIT that passes 1,000 WAL
pages, so every few hundred jobs one commit of the writer paid for it while the
write lock was held.

Here the writer's commits only *count* rows changed and poke a
:class:`Checkpointer` after :data:`CHECKPOINT_EVERY` of them. It runs
``PRAGMA wal_checkpoint(PASSIVE)`` on its own connection in its own thread: a
passive checkpoint never waits for (or blocks) writers or readers, it copies
what it can. The writer keeps SQLite's automatic checkpoint as a backstop at
4,000 pages (``writer_tuning`` in pragmas.sql): when a busy writer never leaves the
WAL fully copied at the start of a transaction, that backstop is what lets the
WAL start over from its beginning, and by then there is little left to copy.
The WAL therefore stays bounded at about 4,000 pages (16 MiB).
"""

from __future__ import annotations

import logging
import sqlite3
import threading

from conveyor.backends.sqlite.queries import P
from conveyor.backends.sqlite.url import SQLiteOptions

logger = logging.getLogger("conveyor.backends.sqlite")

#: Rows changed by this process's writer between two background checkpoints
#: (a drain writes ~0.16 WAL pages per changed row, an enqueue ~0.06).
CHECKPOINT_EVERY = 2000
#: Seconds the checkpointer's connection may wait for a lock while it opens.
SETUP_TIMEOUT = 10.0


class Checkpointer:
    """A thread with its own connection that runs passive checkpoints on request."""

    def __init__(self, options: SQLiteOptions) -> None:
        self.options = options
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._changes_seen = 0
        self.checkpoints = 0
        """Passive checkpoints run so far (for tests and curiosity)."""

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopping = False
        self._changes_seen = 0
        self._thread = threading.Thread(
            target=self._run, name="conveyor-sqlite-checkpointer", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stopping = True
        self._wake.set()
        thread.join()

    def after_commit(self, conn: sqlite3.Connection) -> None:
        """Called by the writer thread after each commit: poke when due."""
        changes = conn.total_changes
        if changes - self._changes_seen >= CHECKPOINT_EVERY:
            self._changes_seen = changes
            self._wake.set()

    def request(self) -> None:
        """Checkpoint soon, whatever the count says."""
        self._wake.set()

    def _run(self) -> None:
        try:
            # Opening may meet the writer setting the file up (WAL mode, schema):
            # wait for it like any connection. A passive checkpoint itself never
            # waits on the busy timeout.
            conn = sqlite3.connect(
                self.options.path,
                timeout=SETUP_TIMEOUT,
                isolation_level=None,
                check_same_thread=True,
            )
            for pragma in (*P.synchronous(self.options.synchronous), *P.checkpointer_tuning):
                conn.execute(pragma)
        except sqlite3.Error as exc:
            logger.warning(
                "no background checkpoints for %s (the writer's own take over): %s",
                self.options.path,
                exc,
            )
            return
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                try:
                    for pragma in P.checkpoint:
                        conn.execute(pragma).fetchall()
                    self.checkpoints += 1
                except sqlite3.Error as exc:  # busy or gone: the next poke tries again
                    logger.debug("background checkpoint of %s failed: %s", self.options.path, exc)
        finally:
            conn.close()

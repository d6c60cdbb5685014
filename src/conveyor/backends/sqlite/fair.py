"""The claim of a request that names a fair queue: the rule of
``backends/base.py`` (weighted round-robin across tenants) on the writer.

Runs inside the claim's write transaction, so claimers are serialised and each
sees the passes and vtime the one before it stored. Each fair queue is a
stream yielding its jobs in fair order, each plain queue of the request a
stream in the usual order; the claim takes the stream head with the smallest
usual key, one job at a time, re-checking the per-task caps and key groups the
jobs chosen so far have filled. The chosen jobs are claimed by one statement
at the end; until then the head queries leave them out by id.

The tenants of a fair queue are its rows of ``fair_tenants`` (registered by
triggers when a job of the queue becomes waiting); a claim reads them in the
rule's order a chunk at a time, so it costs a head query per tenant it
visits, not a read of every tenant.
"""

from __future__ import annotations

import heapq
import sqlite3
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from conveyor.backends.sqlite.decode import Row
from conveyor.backends.sqlite.queries import Q, json_param
from conveyor.backends.sqlite.ratekeys import RateKeyWindows
from conveyor.backends.sqlite.reads import weights_of

#: (id, task, concurrency_key, priority, run_at, rate_limit_key): a candidate job.
Head = tuple[str, str, str | None, int, float, str | None]
#: A per-key concurrency group: (task, concurrency_key).
Group = tuple[str, str | None]


def usual_key(head: Head) -> tuple[int, float, str]:
    """The usual claim order: priority desc, run_at asc, id asc."""
    return (-head[3], head[4], head[0])


def tenant_of(key: str) -> str | None:
    """The tenant of a ``fair_tenants.tenant_key`` ('' is no tenant, else '=' + name)."""
    return key[1:] if key else None


@dataclass(slots=True)
class Limits:
    """What the request still allows, updated as jobs are chosen: task caps,
    key groups and (``windows``) the rate windows per key."""

    caps: dict[str, int]
    excluded: set[str]
    key_caps: dict[str, int]
    held: dict[Group, int] = field(default_factory=dict)
    full: set[Group] = field(default_factory=set)
    taken: dict[str, int] = field(default_factory=dict)
    windows: RateKeyWindows | None = None

    def allows(self, head: Head) -> bool:
        if head[1] in self.excluded or (head[1], head[2]) in self.full:
            return False
        windows = self.windows
        # A spent window is noted, so the head queries leave its jobs out from then on.
        return windows is None or not windows.limits(head[1]) or windows.has_room(head[1], head[5])

    def filters(self) -> bool:
        """Whether the head queries have anything to leave out."""
        return bool(self.excluded or self.full or (self.windows and self.windows.spent))

    def take(self, head: Head) -> None:
        task = head[1]
        count = self.taken[task] = self.taken.get(task, 0) + 1
        cap = self.caps.get(task)
        if cap is not None and count >= cap:
            self.excluded.add(task)
        key_cap = self.key_caps.get(task)
        if key_cap is not None:
            group = (task, head[2])
            used = self.held[group] = self.held.get(group, 0) + 1
            if used >= key_cap:
                self.full.add(group)
        if self.windows is not None and self.windows.limits(task):
            self.windows.take(task, head[5])

    def params(self) -> dict[str, str]:
        spent = self.windows.spent if self.windows is not None else set()
        return {
            "excluded": json_param(sorted(self.excluded)),
            "full": json_param([list(group) for group in sorted(self.full, key=str)]),
            "rate_full": json_param([list(window) for window in sorted(spent, key=str)]),
        }


class Heads:
    """The next claimable jobs of one stream (a plain queue, or one tenant of a
    fair queue), read a batch at a time. A tenant's batches start at one job
    and double (most tenants of a busy fair queue give one job per claim); a
    plain queue's are what the claim still wants."""

    __slots__ = ("batch", "chosen", "exhausted", "params", "query", "ready")

    def __init__(self, query: str, params: dict[str, Any], batch: int | None = None) -> None:
        self.query = query
        self.params = params
        self.batch = batch
        self.ready: deque[Head] = deque()
        self.chosen: list[str] = []
        self.exhausted = False

    def first(self, conn: sqlite3.Connection, limits: Limits, now: float, want: int) -> Head | None:
        """The first job still claimable; ``None`` once there is none."""
        while True:
            while self.ready and not limits.allows(self.ready[0]):
                self.ready.popleft()  # limits only tighten within a claim
            if self.ready:
                return self.ready[0]
            if self.exhausted:
                return None
            if self.batch is not None:
                want, self.batch = min(want, self.batch), self.batch * 2
            params = {**self.params, "now": now, "limit": want}
            query = self.query
            if query is Q.fair_heads and not (self.chosen or limits.filters()):
                query = Q.fair_heads_unfiltered  # the common case: nothing to leave out
            else:
                params.update(limits.params(), taken=json_param(self.chosen))
            rows = conn.execute(query, params).fetchall()
            self.exhausted = len(rows) < want
            self.ready.extend(rows)

    def take(self) -> Head:
        head = self.ready.popleft()
        self.chosen.append(head[0])
        return head


class PlainStream:
    """A plain queue of the request: its jobs in the usual order."""

    def __init__(self, queue: str) -> None:
        self.heads = Heads(Q.plain_heads, {"queue": queue})

    def next(self, conn: sqlite3.Connection, limits: Limits, now: float, want: int) -> Head | None:
        return self.heads.first(conn, limits, now, want)

    def taken(self, conn: sqlite3.Connection) -> None:
        self.heads.take()


#: Fewest tenants read at a time from each of a fair queue's two orders.
TENANT_CHUNK = 16
#: Where a heap entry came from: the tenants at vtime, those ahead of it, or
#: a tenant this claim served (pushed back with its new pass).
LEVEL, AHEAD, SERVED = 0, 1, 2


class FairStream:
    """A fair queue: the tenant the rule picks next, and that tenant's head.

    The registered tenants fall in two orders read lazily, a chunk at a time,
    and merged in a heap of ``(effective pass, tenant_key, source)``: those
    with pass <= vtime stand at vtime in tenant_key order (``fair_level``),
    those ahead by (pass, tenant_key) (``fair_ahead``); tenant_key sorts as the
    rule orders tenants. While an order has unread tenants, one of its
    tenants stays in the heap, so the heap's smallest entry is the rule's. The
    keys never go stale within the claim: vtime only moves up to the heap's
    smallest effective pass, and every unread tenant's is at least that.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        queue: str,
        weights: Mapping[str, float],
        vtime: float,
        now: float,
        limit: int,
    ) -> None:
        self.queue = queue
        self.chunk = max(TENANT_CHUNK, limit)  # a claim of n jobs visits about n tenants
        self.weights = weights
        self.now = now
        self.start = vtime  # the two orders split at the vtime the claim began with
        self.vtime = vtime
        self.order: list[tuple[float, str, int]] = []
        self.in_heap = [0, 0]
        self.level_from: str | None = ""  # None: read to the end
        self.ahead_after: tuple[float, str] | None = (vtime, "")
        self.tenants: dict[str, Heads] = {}
        self.first: dict[str, Head | None] = {}  # read per chunk, until the tenant is visited
        self.changed: dict[str, float] = {}
        self.gone: list[str] = []
        self._read(conn, LEVEL)
        self._read(conn, AHEAD)

    def _read(self, conn: sqlite3.Connection, source: int) -> None:
        base = {"queue": self.queue, "vtime": self.start, "limit": self.chunk}
        if source == LEVEL:
            if self.level_from is None:
                return
            rows = conn.execute(Q.fair_level, {**base, "start": self.level_from}).fetchall()
            entries = [(self.start, key, LEVEL) for key, _ in rows]
            # key + NUL is the smallest text after key (TEXT compares as bytes)
            self.level_from = rows[-1][0] + "\0" if len(rows) == self.chunk else None
        else:
            if self.ahead_after is None:
                return
            passed, after = self.ahead_after
            params = {**base, "pass": passed, "after": after}
            rows = conn.execute(Q.fair_ahead, params).fetchall()
            entries = [(p, key, AHEAD) for key, p in rows]
            self.ahead_after = (rows[-1][1], rows[-1][0]) if len(rows) == self.chunk else None
        self.order.extend(entries)
        heapq.heapify(self.order)
        self.in_heap[source] += len(entries)
        self._first_heads(conn, [key for _, key, _ in entries])

    def _first_heads(self, conn: sqlite3.Connection, keys: list[str]) -> None:
        """Each new tenant's first due job, for the whole chunk in one statement
        (a tenant missing from the answer has nothing due at all)."""
        if not keys:
            return
        params = {
            "queue": self.queue,
            "now": self.now,
            "tenants": json_param([tenant_of(key) for key in keys]),
        }
        found = {row[0]: row[1:] for row in conn.execute(Q.fair_first_heads, params)}
        for key in keys:
            self.first[key] = found.get(tenant_of(key))

    def _left(self, conn: sqlite3.Connection, source: int) -> None:
        """An entry of ``source`` left the heap: read on when it was the last."""
        if source != SERVED:
            self.in_heap[source] -= 1
            if self.in_heap[source] == 0:
                self._read(conn, source)

    def _heads(self, key: str) -> Heads:
        heads = self.tenants.get(key)
        if heads is None:
            params = {"queue": self.queue, "tenant": tenant_of(key)}
            heads = self.tenants[key] = Heads(Q.fair_heads, params, batch=1)
            first = self.first.pop(key, None)
            if first is None:
                heads.exhausted = True  # nothing of it is due at all
            else:
                heads.ready.append(first)
        return heads

    def next(self, conn: sqlite3.Connection, limits: Limits, now: float, want: int) -> Head | None:
        """The head of the tenant with the smallest effective pass that has a
        claimable job; tenants with none leave the heap for this claim."""
        while self.order:
            _, key, source = self.order[0]
            head = self._heads(key).first(conn, limits, now, want)
            if head is not None:
                return head
            heapq.heappop(self.order)
            self._left(conn, source)
            self._maybe_gone(conn, key)
        return None

    def _maybe_gone(self, conn: sqlite3.Connection, key: str) -> None:
        """A tenant with nothing claimable: forget it if nothing of it waits."""
        if self.tenants[key].chosen:
            return
        waits = conn.execute(Q.fair_tenant_waits, {"queue": self.queue, "tenant": tenant_of(key)})
        if not waits.fetchone()[0]:
            self.gone.append(key)

    def taken(self, conn: sqlite3.Connection) -> None:
        effective, key, source = self.order[0]
        self.tenants[key].take()
        tenant = tenant_of(key)
        weight = 1.0 if tenant is None else self.weights.get(tenant, 1.0)
        passed = effective + 1.0 / weight
        self.changed[key] = passed
        self.vtime = effective
        heapq.heapreplace(self.order, (passed, key, SERVED))
        self._left(conn, source)

    def save(self, conn: sqlite3.Connection) -> None:
        if self.changed:
            passes = {"queue": self.queue, "passes": json_param(self.changed)}
            conn.execute(Q.fair_pass_set, passes)
            conn.execute(Q.fair_vtime, {"queue": self.queue, "vtime": self.vtime})
        for key in self.gone:
            conn.execute(Q.fair_tenant_drop, {"queue": self.queue, "key": key, "vtime": self.vtime})


@dataclass(slots=True)
class FairRequest:
    """The queues of a claim when one of them is fair."""

    fair: dict[str, tuple[str | None, float]]
    """Fair queue -> (stored weights, vtime)."""
    paused: set[str]


def fair_request(conn: sqlite3.Connection, queues: list[str]) -> FairRequest | None:
    """The fair queues among ``queues`` and the paused ones; ``None`` when none is fair."""
    rows = conn.execute(Q.fair_queues, {"queues": json_param(queues)}).fetchall()
    if not rows:
        return None
    return FairRequest(
        fair={name: (weights, vtime) for name, _, fairness, weights, vtime in rows if fairness},
        paused={name for name, paused, *_ in rows if paused},
    )


def claim_fair(
    conn: sqlite3.Connection,
    params: dict[str, Any],
    queues: list[str],
    request: FairRequest,
    limits: Limits,
) -> list[Row]:
    """Claim up to ``params["limit"]`` jobs of ``queues`` (fair ones among them)
    by the rule; passes and vtime are stored in the same transaction."""
    now = float(params["now"])
    limit = int(params["limit"])
    if limits.key_caps:
        counted = conn.execute(Q.key_slots_used, {"tasks": json_param(sorted(limits.key_caps))})
        for task, key, used in counted.fetchall():
            limits.held[(task, key)] = used
            if used >= limits.key_caps[task]:
                limits.full.add((task, key))
    streams: list[PlainStream | FairStream] = []
    for queue in queues:
        if queue in request.paused:
            continue
        if queue in request.fair:
            weights, vtime = request.fair[queue]
            streams.append(FairStream(conn, queue, weights_of(weights), vtime, now, limit))
        else:
            streams.append(PlainStream(queue))
    chosen: list[str] = []
    while len(chosen) < limit:
        want = limit - len(chosen)
        best: tuple[PlainStream | FairStream, Head] | None = None
        for stream in streams:
            head = stream.next(conn, limits, now, want)
            if head is not None and (best is None or usual_key(head) < usual_key(best[1])):
                best = (stream, head)
        if best is None:
            break
        stream, head = best
        chosen.append(head[0])
        limits.take(head)
        stream.taken(conn)
    for stream in streams:
        if isinstance(stream, FairStream):
            stream.save(conn)
    if not chosen:
        return []
    return conn.execute(Q.claim_ids, {**params, "ids": json_param(chosen)}).fetchall()

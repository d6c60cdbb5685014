"""The claim of a request that names a fair queue: the rule of
``backends/base.py`` (weighted round-robin across tenants) on the writer.

Runs inside the claim's write transaction, so claimers are serialised and each
sees the passes and vtime the one before it stored. Each fair queue is a
stream yielding its jobs in fair order, each plain queue of the request a
stream in the usual order; the claim takes the stream head with the smallest
usual key, one job at a time, re-checking the per-task caps and key groups the
jobs taken so far have filled.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from conveyor.backends.fairness import tenant_order
from conveyor.backends.sqlite.decode import Row
from conveyor.backends.sqlite.queries import Q, json_param
from conveyor.backends.sqlite.reads import weights_of

#: (id, task, concurrency_key, priority, run_at): a candidate job.
Head = tuple[str, str, str | None, int, float]
#: A per-key concurrency group: (task, concurrency_key).
Group = tuple[str, str | None]
#: Stored passes are trimmed once a queue holds more than this many.
PASSES_KEPT = 64


def usual_key(head: Head) -> tuple[int, float, str]:
    """The usual claim order: priority desc, run_at asc, id asc."""
    return (-head[3], head[4], head[0])


@dataclass(slots=True)
class Limits:
    """What the request still allows, updated as jobs are taken."""

    caps: dict[str, int]
    excluded: set[str]
    key_caps: dict[str, int]
    held: dict[Group, int] = field(default_factory=dict)
    full: set[Group] = field(default_factory=set)
    taken: dict[str, int] = field(default_factory=dict)

    def allows(self, head: Head) -> bool:
        return head[1] not in self.excluded and (head[1], head[2]) not in self.full

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

    def params(self) -> dict[str, str]:
        return {
            "excluded": json_param(sorted(self.excluded)),
            "full": json_param([list(group) for group in sorted(self.full, key=str)]),
        }


class PlainStream:
    """A plain queue of the request: its jobs in the usual order."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.head: Head | None = None
        self.done = False

    def next(self, conn: sqlite3.Connection, limits: Limits, now: float) -> Head | None:
        if self.done:
            return None
        if self.head is None or not limits.allows(self.head):
            params = {"queue": self.queue, "now": now, **limits.params()}
            self.head = conn.execute(Q.plain_head, params).fetchone()
            self.done = self.head is None
        return self.head

    def taken(self) -> None:
        self.head = None


class FairStream:
    """A fair queue: the tenant the rule picks next, and that tenant's head."""

    def __init__(
        self, conn: sqlite3.Connection, queue: str, weights: Mapping[str, float], vtime: float
    ) -> None:
        self.queue = queue
        self.weights = weights
        self.vtime = vtime
        self.passes: dict[str | None, float] = dict(
            conn.execute(Q.fair_passes_of, {"queue": queue}).fetchall()
        )
        self.changed: set[str | None] = set()
        tenants: list[str | None] = [
            t for (t,) in conn.execute(Q.fair_tenants, {"queue": queue}).fetchall()
        ]
        if conn.execute(Q.fair_untenanted, {"queue": queue}).fetchone()[0]:
            tenants.insert(0, None)
        self.tenants = tenants
        self.heads: dict[str | None, Head] = {}
        self.pick: tuple[str | None, float] | None = None

    def effective(self, tenant: str | None) -> float:
        return max(self.passes.get(tenant, self.vtime), self.vtime)

    def next(self, conn: sqlite3.Connection, limits: Limits, now: float) -> Head | None:
        """The head of the tenant with the smallest effective pass that has a
        claimable job; tenants found with none are dropped for this claim
        (within a claim, limits only ever tighten)."""
        self.pick = None
        self.tenants.sort(key=lambda t: (self.effective(t), tenant_order(t)))
        params: dict[str, Any] | None = None
        for tenant in list(self.tenants):
            head = self.heads.get(tenant)
            if head is None or not limits.allows(head):
                if params is None:
                    params = {"queue": self.queue, "now": now, **limits.params()}
                head = conn.execute(Q.fair_head, {**params, "tenant": tenant}).fetchone()
                if head is None:
                    self.tenants.remove(tenant)
                    self.heads.pop(tenant, None)
                    continue
                self.heads[tenant] = head
            self.pick = (tenant, self.effective(tenant))
            return head
        return None

    def taken(self) -> None:
        assert self.pick is not None
        tenant, effective = self.pick
        weight = 1.0 if tenant is None else self.weights.get(tenant, 1.0)
        self.passes[tenant] = effective + 1.0 / weight
        self.vtime = effective
        self.changed.add(tenant)
        self.heads.pop(tenant, None)

    def save(self, conn: sqlite3.Connection) -> None:
        if not self.changed:
            return
        for tenant in self.changed:
            row = {"queue": self.queue, "tenant": tenant, "pass": self.passes[tenant]}
            if conn.execute(Q.fair_pass_update, row).rowcount == 0:
                conn.execute(Q.fair_pass_insert, row)
        conn.execute(Q.fair_vtime, {"queue": self.queue, "vtime": self.vtime})
        if len(self.passes) > PASSES_KEPT:
            conn.execute(Q.fair_passes_trim, {"queue": self.queue, "vtime": self.vtime})


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
    """Claim up to ``params["limit"]`` jobs of ``queues`` (``fair`` among them)
    one at a time by the rule; passes and vtime stored before returning."""
    now = float(params["now"])
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
            streams.append(FairStream(conn, queue, weights_of(weights), vtime))
        else:
            streams.append(PlainStream(queue))
    rows: list[Row] = []
    while len(rows) < int(params["limit"]):
        best: tuple[PlainStream | FairStream, Head] | None = None
        for stream in streams:
            head = stream.next(conn, limits, now)
            if head is not None and (best is None or usual_key(head) < usual_key(best[1])):
                best = (stream, head)
        if best is None:
            break
        stream, head = best
        claimed = conn.execute(Q.claim_ids, {**params, "ids": json_param([head[0]])}).fetchall()
        rows.extend(claimed)
        limits.take(head)
        stream.taken()
    for stream in streams:
        if isinstance(stream, FairStream):
            stream.save(conn)
    return rows

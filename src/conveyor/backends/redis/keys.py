"""Every Redis key name of one app, built in one place.

All keys of an app share the hash tag ``{conveyor:<prefix>}``, so every script
touches a single cluster slot. The Lua scripts build per-job and per-queue names
with the same rules (``scripts/lib.lua``); the fixed names are passed as KEYS.
"""

from __future__ import annotations

from dataclasses import dataclass


def base_for(prefix: str) -> str:
    """The hash-tagged base every key of the app ``prefix`` starts with."""
    return f"{{conveyor:{prefix}}}:"


@dataclass(frozen=True, slots=True)
class Keys:
    base: str

    @classmethod
    def for_prefix(cls, prefix: str) -> Keys:
        return cls(base_for(prefix))

    # -- fixed keys ------------------------------------------------------------
    @property
    def all(self) -> str:
        """ZSET (score 0, lexicographic): every job id, for listings newest first."""
        return self.base + "all"

    @property
    def delayed(self) -> str:
        """ZSET job id by run_at: delayed jobs, promoted inside the claim."""
        return self.base + "delayed"

    @property
    def expiring(self) -> str:
        """ZSET job id by expires_at: waiting jobs that have a TTL."""
        return self.base + "expiring"

    @property
    def active(self) -> str:
        """ZSET job id by lease_until: active jobs, for stall recovery."""
        return self.base + "active"

    @property
    def blocked(self) -> str:
        """ZSET (score 0): jobs blocked on their dependencies."""
        return self.base + "blocked"

    @property
    def queues(self) -> str:
        """SET of every queue name configured or used."""
        return self.base + "queues"

    @property
    def circuits(self) -> str:
        """SET of the tasks that have a circuit."""
        return self.base + "circuits"

    @property
    def workers(self) -> str:
        """HASH worker id -> JSON description."""
        return self.base + "workers"

    @property
    def workers_seen(self) -> str:
        """ZSET worker id by last_seen."""
        return self.base + "seen"

    @property
    def schedules(self) -> str:
        """SET of schedule names."""
        return self.base + "schedules"

    @property
    def stats(self) -> str:
        """HASH: cumulative job statistics per (task, queue, status)."""
        return self.base + "stats"

    @property
    def stat_minutes(self) -> str:
        """ZSET of the minutes that hold series rows."""
        return self.base + "minutes"

    @property
    def fence(self) -> str:
        """STRING (expires by itself): WAIT mode's own write when an enqueue
        answered with jobs stored earlier, so that its WAIT covers them."""
        return self.base + "fence"

    @property
    def wake(self) -> str:
        """Pub/sub channel: ``q:<queue>`` new work, ``t:`` a new timer, ``a:`` everyone."""
        return self.base + "wake"

    # -- per-item keys ---------------------------------------------------------
    def job(self, job_id: str) -> str:
        """HASH: one job (short field names, see decode.py)."""
        return f"{self.base}j:{job_id}"

    def payload(self, job_id: str) -> str:
        """STRING: one job's payload, apart from its hash (a hash with a value over
        64 bytes stops being a compact listpack)."""
        return f"{self.base}p:{job_id}"

    def dependents(self, job_id: str) -> str:
        """SET: ids of the blocked jobs waiting for this one (its hash has dn=1)."""
        return f"{self.base}dep:{job_id}"

    def workflow_jobs(self, workflow_id: str) -> str:
        """ZSET (score 0, lexicographic): the ids of one workflow's jobs, read by
        a listing filtered by workflow (kept by enqueue, retry and every delete;
        a workflow stored before this index existed has none and is scanned)."""
        return f"{self.base}wfj:{workflow_id}"

    def done(self, state: str) -> str:
        """ZSET job id by finished_at, per terminal state (retention)."""
        return f"{self.base}done:{state}"

    def waiting(self, queue: str, task: str) -> str:
        """ZSET of one (queue, task)'s waiting jobs: score -priority, member run_at+id."""
        return f"{self.base}w:{len(queue)}:{queue}:{task}"

    def waiting_tasks(self, queue: str) -> str:
        """SET of the tasks that have waiting jobs in ``queue``."""
        return f"{self.base}wt:{queue}"

    def fair_tenants(self, queue: str) -> str:
        """ZSET tenant code -> pass: a fair queue's tenants that have waiting jobs
        (the claim's candidates; tenant codes and the other fair-queue keys,
        ``fw:``, ``ftk:``, ``fs:``, ``qw:``, are built in ``scripts/lib.lua``)."""
        return f"{self.base}fq:{queue}"

    def counts(self, queue: str) -> str:
        """HASH state -> number of jobs of ``queue``."""
        return f"{self.base}n:{queue}"

    def queue_config(self, queue: str) -> str:
        """HASH: paused, max_size, ttl, fair ("tenant" for a fair queue) of ``queue``."""
        return f"{self.base}qc:{queue}"

    def idempotency(self, key: str) -> str:
        """HASH id/task/queue(/state): a live idempotency key (expires by itself)."""
        return f"{self.base}idem:{key}"

    def rate(self, task: str) -> str:
        """ZSET: start log of a rate-limited task (expires by itself)."""
        return f"{self.base}rate:{task}"

    def circuit(self, task: str) -> str:
        """HASH: state, failures, open_until, open_for of a task's circuit."""
        return f"{self.base}circuit:{task}"

    def schedule(self, name: str) -> str:
        """HASH: one stored schedule."""
        return f"{self.base}sched:{name}"

    def minute(self, minute: str) -> str:
        """HASH: job statistics of one minute."""
        return f"{self.base}sm:{minute}"

    def slots(self, task: str, concurrency_key: str | None) -> str:
        """SET: ids of the active jobs of one (task, concurrency_key) group, the
        slots ``ClaimRequest.key_limits`` count (kept by claim, settle, recover)."""
        group = f"{self.base}ka:{len(task)}:{task}"
        return group if concurrency_key is None else f"{group}:{concurrency_key}"

    def rate_window(self, task: str, rate_limit_key: str | None) -> str:
        """ZSET: start log of one (task, rate_limit_key) window, the windows
        ``ClaimRequest.key_rate_limits`` count (kept by claim, expires by itself)."""
        window = f"{self.base}rk:{len(task.encode())}:{task}"
        return window if rate_limit_key is None else f"{window}:{rate_limit_key}"

    def rate_windows(self, task: str) -> str:
        """ZSET: the index of ``task``'s rate windows, member ``0`` for the keyless
        window and ``1<key>`` for ``key``, scored by the window's last start (kept
        by claim with the window logs, expires by itself)."""
        return f"{self.base}rki:{task}"

    def idle(self, queue: str) -> str:
        """ZSET worker id by registration end: ``queue``'s idle workers (direct handoff)."""
        return f"{self.base}idle:{queue}"

    def idle_worker(self, worker_id: str) -> str:
        """HASH: an idle worker's claim request (free, lease, token, circuits, queues)."""
        return f"{self.base}iw:{worker_id}"

    def inbox(self, worker_id: str) -> str:
        """LIST: jobs enqueues claimed for an idle worker, packed, until it pops them."""
        return f"{self.base}inbox:{worker_id}"

    def pattern(self) -> str:
        """SCAN MATCH pattern of every key of this app."""
        return self.base.replace("[", "\\[").replace("?", "\\?").replace("*", "\\*") + "*"

"""The backend contract: flat, named, batch-shaped storage operations.

A backend persists jobs and carries out state changes atomically. It never
decides policy: retries, backoff, which outcome a run had, rate-limit and
circuit thresholds all come from the core as parameters. Every backend passes
the same conformance suite (``tests/conformance``).

Rules every implementation follows:

- Times are POSIX seconds read from the backend's own clock (G11); ``now()``
  exposes it. Relative inputs (``delay``, ``ttl``, ``lease``) are added to that
  clock inside the operation, never to a worker's.
- ``claim_jobs`` is atomic: two claimers never get the same job. It counts the
  attempt (G5), stamps a fresh lease token (G4), and expires TTL'd jobs and
  promotes due delayed jobs before choosing (G8).
- ``settle_and_claim`` is ``settle_jobs`` followed by ``claim_jobs``: the
  claim sees what the settle did (released dependents, freed key slots, closed
  circuits) and follows every claim rule above. One round trip where the store
  allows it (the default makes two calls).
- ``renew_leases``, ``settle_jobs`` and ``save_progress`` act only on jobs that
  are ``active`` with the given lease token; anything else is refused (G4).
- A TTL bounds each wait, not only the first: a job keeps its effective ``ttl``
  and ``expires_at`` is re-set to the start of the wait + ``ttl`` every time it
  (re)enters waiting (enqueue, retry, release, stall recovery, dead-letter retry).
- RELEASE gives the attempt back. With ``retry_delay`` 0 the job is ``waiting``
  again in its old place (``run_at`` kept); with ``retry_delay`` > 0 it is
  ``delayed`` until now + ``retry_delay``, like a RETRY, its ``expires_at`` that
  run_at + ``ttl``.
- A pending cancel wins over RETRY, RELEASE and stall recovery: the job ends
  ``cancelled`` instead of waiting again.
- One call is one round trip (or one transaction) whatever the batch size.
- Dependencies (``NewJob.depends_on``): every id must be a stored job or one
  earlier in the same batch, else ``InvalidWorkflow`` and nothing is stored. At
  enqueue a job whose dependencies all completed (or finished, with policy
  ``run``) is waiting/delayed as usual; one with a dependency that failed or was
  cancelled and policy ``cancel`` is stored ``cancelled`` with failure reason
  ``dependency_failed``; otherwise it is ``blocked``. Whenever a job becomes
  terminal, in whatever operation (settle, cancel, stall recovery, TTL expiry in
  the claim), the same operation resolves its blocked dependents: released to
  waiting (delayed if their ``run_at`` is still ahead) once every dependency is
  satisfied, or cancelled ``dependency_failed``, transitively. Exactly once,
  however many operations finish dependencies at the same moment.
- Per-key concurrency (``ClaimRequest.key_limits``): a job of a capped task
  holds one slot of its ``(task, concurrency_key)`` group exactly while it is
  ``active``. The slot is taken inside the claim, atomically with it (two
  claimers on different hosts never pass the cap between them), and given back
  by every way out of ``active``: settle (complete, retry, fail, cancel,
  release), stall recovery, the end of a handoff. A claim skips a full group and
  takes the jobs behind it; slots count claims made with or without a
  ``key_limits`` entry for the task (every active job counts).
- Rate limits per key (``ClaimRequest.key_rate_limits``): one sliding window of
  starts per ``(task, rate_limit_key)`` (``None`` is one window of its own),
  with ``rate_limits``' mechanics: at most ``limit`` starts in ``(now - period,
  now]``, each claimed job of the task logging a start at ``now`` in its key's
  window. Read and logged inside the claim, atomically with it (claimers on
  many hosts never pass a key's limit between them). A claim skips a spent key
  and takes the jobs behind it. The windows are apart from the task-wide
  ``rate_limits`` window; a task in both is held to both. Only claims that
  carry a task's ``key_rate_limits`` entry log its starts in the key windows.
- Debounce (``NewJob.debounce`` with an ``idempotency_key``): when the key's live
  job is ``waiting`` or ``delayed``, the enqueue replaces that job's payload and
  metadata, moves it to ``delayed`` until now + ``debounce`` (``expires_at`` from
  then + ``ttl``), renews the key's expiry, and returns the job with
  ``duplicate=True``; nothing else about it changes. When the key's job is
  ``active``, ``blocked`` or finished, or the key is free, a new job is stored,
  delayed until now + ``debounce``, and the key points at it. Atomic: concurrent
  debounced enqueues of one key from many processes leave one unstarted job,
  carrying the payload of the enqueue that was stored last. In one batch, a key's
  entries are either all debounced or none (the core refuses a mix): later
  debounced entries give the job the first one left unstarted their payload.
- Fair queues (``QueueInfo.fairness == "tenant"``): a claim takes a fair
  queue's jobs weighted round-robin across tenants (``Job.tenant``; ``None`` is
  a tenant of its own, sorted before every name). The store keeps a virtual
  time ``vtime[Q]`` per fair queue (from 0) and a ``pass[Q, t]`` per tenant.
  To take the next job from Q: (1) candidates are the tenants with at least one
  *claimable* job in Q (waiting, due, allowed by every limit of the request:
  task limits, rate limits, circuits, key limits, key rate limits) -- a tenant
  with nothing claimable (its next jobs in full key groups or spent rate
  windows, say) is not examined and earns no credit; (2) ``effective[t] =
  max(pass[Q, t], vtime[Q])`` (``vtime[Q]`` for a tenant never seen); (3) the
  smallest effective wins, ties by tenant name (``None`` first); (4) that
  tenant's first claimable job in the usual order (priority desc, run_at asc,
  id asc) is taken; (5) ``pass[Q, t] = effective[t] + 1 / weight[t]`` and
  ``vtime[Q] = effective[t]``. Repeated for every job a claim takes (fairness
  holds within a batch), written atomically with the claim, so concurrent
  claimers see each other's updates. A claim over several queues merges the
  queues' streams (fair order for a fair queue, usual order otherwise) by
  their head jobs' usual key. pass and vtime survive restarts; a store may
  drop a tenant's pass once it is <= vtime. Weights {A: 3} with A and B
  backlogged give A B A A A B A A A B ...; a tenant arriving later is served
  within one round. A handoff never bypasses the rule.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from conveyor.backends.operations import (
    CircuitPolicy,
    ClaimRequest,
    ClaimResult,
    Handoff,
    JobFilter,
    NewJob,
    Outcome,
    PruneRule,
    RenewResult,
    Settlement,
    SettleResult,
    StallResult,
    earlier_retry,
)
from conveyor.backends.records import (
    COUNTED_STATES,
    DURATION_BUCKETS,
    CircuitInfo,
    CircuitState,
    JobStat,
    KeyCount,
    MisfirePolicy,
    QueueInfo,
    RateKeyUse,
    ScheduleRecord,
    ScheduleSpec,
    TenantCount,
    WorkerInfo,
    fit_buckets,
)
from conveyor.job import Job
from conveyor.ratelimit import RateLimit

# The contract's records live in records.py and its operations' inputs and
# outputs in operations.py; importing them from here keeps one place to import
# the whole contract from.
__all__ = [
    "COUNTED_STATES",
    "DURATION_BUCKETS",
    "Backend",
    "CircuitInfo",
    "CircuitPolicy",
    "CircuitState",
    "ClaimRequest",
    "ClaimResult",
    "Handoff",
    "JobFilter",
    "JobStat",
    "KeyCount",
    "MisfirePolicy",
    "NewJob",
    "Outcome",
    "PruneRule",
    "QueueInfo",
    "RateKeyUse",
    "RenewResult",
    "ScheduleRecord",
    "ScheduleSpec",
    "SettleResult",
    "Settlement",
    "StallResult",
    "TenantCount",
    "TransactionalEnqueue",
    "WorkerInfo",
    "earlier_retry",
    "fit_buckets",
]


class Backend(abc.ABC):
    """Storage for jobs, queues, circuits, rate-limit windows and heartbeats."""

    url: str

    # -- lifecycle ---------------------------------------------------------
    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and bring the schema up to date. Idempotent."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections. Idempotent."""

    @abc.abstractmethod
    async def now(self) -> float:
        """The backend's clock, POSIX seconds (G11)."""

    @abc.abstractmethod
    async def ping(self) -> float:
        """Round-trip latency in seconds; raises :class:`BackendUnavailable` when down."""

    # -- jobs: the hot path ------------------------------------------------
    @abc.abstractmethod
    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        """Insert ``jobs`` atomically, in order; returns one Job per input.

        A live idempotency key returns the existing job with ``duplicate=True``
        and inserts nothing for it (G7). A queue's ``max_size`` counts its
        waiting + delayed jobs; a batch that would pass it raises
        :class:`~conveyor.errors.QueueFull` and stores nothing.
        """

    @abc.abstractmethod
    async def claim_jobs(self, request: ClaimRequest) -> ClaimResult:
        """Atomically claim up to ``request.limit`` due jobs (see module doc)."""

    @abc.abstractmethod
    async def renew_leases(
        self, worker_id: str, leases: Sequence[tuple[str, str]], lease: float
    ) -> RenewResult:
        """Extend ``(job_id, lease_token)`` leases to ``now + lease``."""

    @abc.abstractmethod
    async def settle_jobs(self, settlements: Sequence[Settlement]) -> SettleResult:
        """Apply each run's outcome, fenced by its lease token; update circuits.
        RETRY/RELEASE of a job with a pending cancel request ends it ``cancelled``."""

    async def settle_and_claim(
        self, settlements: Sequence[Settlement], request: ClaimRequest
    ) -> tuple[SettleResult, ClaimResult]:
        """:meth:`settle_jobs` of ``settlements``, then :meth:`claim_jobs` of
        ``request``, whose claim sees everything the settle did (a dependent it
        released is claimable at once) and follows every claim rule. The worker
        sends its outcomes this way while it waits for work, so that a chain's
        next step comes back with the outcome of the one before. A store may do
        both in one round trip and one transaction; this default makes the two
        calls. A claim that fails after its settle was stored must not hide the
        settle's result: raise only when the settle's fate is unknown."""
        settled = await self.settle_jobs(settlements)
        return settled, await self.claim_jobs(request)

    @abc.abstractmethod
    async def save_progress(self, items: Sequence[tuple[str, str, bytes]]) -> set[str]:
        """Store ``(job_id, lease_token, progress_json)``; returns the refused ids."""

    @abc.abstractmethod
    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        """Return when new work may be due in ``queues``, or after ``timeout``."""

    #: Whether enqueues claim for idle workers (``ClaimRequest.handoff_for``).
    hands_off: bool = False

    async def next_handoff(self, worker_id: str, timeout: float) -> list[Handoff] | None:
        """Wait up to ``timeout`` for jobs handed to ``worker_id`` ([] if none came);
        ``None`` once :meth:`end_handoffs` was called for it. One caller per worker."""
        raise NotImplementedError(f"{type(self).__name__} does not hand off")

    async def end_handoffs(self, worker_id: str, lease: float) -> ClaimResult:
        """Unregister ``worker_id``; returns the jobs handed to it and not yet
        popped (leased to it for ``lease`` seconds from now: the caller releases
        them), and ends its ``next_handoff``."""
        raise NotImplementedError(f"{type(self).__name__} does not hand off")

    # -- jobs: reading and acting ------------------------------------------
    @abc.abstractmethod
    async def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        """The jobs that exist among ``job_ids`` (any order)."""

    @abc.abstractmethod
    async def list_jobs(self, where: JobFilter, limit: int = 100, offset: int = 0) -> list[Job]:
        """Matching jobs, newest first (by id: ids increase with creation)."""

    @abc.abstractmethod
    async def count_jobs(self, where: JobFilter) -> int: ...

    @abc.abstractmethod
    async def cancel_job(self, job_id: str) -> Job | None:
        """Waiting/delayed: cancelled now. Active: flagged ``cancel_requested``.
        Terminal: unchanged. Returns the job after the change, or ``None``."""

    @abc.abstractmethod
    async def cancel_requests(self, job_ids: Sequence[str]) -> set[str]:
        """Which of these active jobs have a cancel request."""

    @abc.abstractmethod
    async def retry_failed(self, job_id: str, new_id: str) -> Job:
        """Copy a failed job into a new waiting job with fresh attempts and the same
        ``ttl`` (``expires_at = now + ttl``), ``workflow_id``, ``depends_on`` and
        ``on_dependency_failure``; the original gets ``retried_as``.

        In the same operation the workflow resumes: each job cancelled
        ``dependency_failed`` because of the original (it depends on it, or on a
        job cancelled that way, transitively) goes back to ``blocked``
        (``failure_reason`` and ``finished_at`` cleared) with the copy's id in
        place of the original's in its ``depends_on``, and is released or
        cancelled by its dependencies as usual. One that also depends on another
        failed or cancelled job stays cancelled (nothing would release it), as
        do jobs cancelled otherwise and every other job (see
        :mod:`conveyor.backends.resume`).

        Once per dead letter, atomically: a failed job that already has
        ``retried_as`` creates nothing and returns that job with
        ``duplicate=True`` (see :func:`earlier_retry`), however many retries race.
        Raises JobNotFound / InvalidStateError."""

    @abc.abstractmethod
    async def delete_jobs(self, job_ids: Sequence[str]) -> int:
        """Delete these jobs (any state but active); returns how many."""

    @abc.abstractmethod
    async def purge_jobs(self, where: JobFilter) -> int:
        """Delete every job matching ``where`` (never active ones)."""

    @abc.abstractmethod
    async def queue_counts(self) -> dict[str, dict[str, int]]:
        """``{queue: {state: count}}`` with every state present (zeros included)."""

    @abc.abstractmethod
    async def oldest_waiting(self) -> dict[str, float]:
        """``{queue: run_at of its oldest due waiting job}``."""

    # -- maintenance -------------------------------------------------------
    @abc.abstractmethod
    async def recover_stalled(self, max_stalled: int) -> StallResult:
        """Active jobs whose lease expired: back to waiting with ``stalls + 1``
        (``expires_at = now + ttl``); failed/stalled when that passes
        ``max_stalled`` or no attempt is left; cancelled when a cancel is pending."""

    @abc.abstractmethod
    async def prune_jobs(self, rules: Sequence[PruneRule]) -> int:
        """Apply retention rules; also drop expired idempotency keys and
        rate-limit history. A workflow's jobs are deleted together, only once
        every one is terminal and due (``backends/workflow_retention.py``).
        Returns how many jobs were deleted."""

    # -- queues ------------------------------------------------------------
    @abc.abstractmethod
    async def configure_queue(self, info: QueueInfo) -> None:
        """Create or update a queue's options: ``max_size``, ``ttl``, ``fairness``
        and ``weights`` (``info.paused`` is ignored: the stored flag is kept).
        Making a queue fair or plain applies to its jobs already waiting."""

    @abc.abstractmethod
    async def set_queue_paused(self, name: str, paused: bool) -> None: ...

    @abc.abstractmethod
    async def list_queues(self) -> list[QueueInfo]:
        """Configured queues and every queue that holds a job."""

    @abc.abstractmethod
    async def tenant_counts(self, queue: str, limit: int = 100) -> list[TenantCount]:
        """Per tenant of ``queue`` (``None`` included), its ``waiting`` + ``delayed``
        and its ``active`` jobs; tenants with neither are left out. The ``limit``
        tenants with most waiting come first (ties: most active, then tenant
        name, ``None`` first)."""

    @abc.abstractmethod
    async def key_counts(self, tasks: Sequence[str], limit: int = 100) -> list[KeyCount]:
        """Per ``(task, concurrency_key)`` group (``None`` key: the task's keyless
        group), its ``active`` jobs and, for a task in ``tasks`` (the key-capped
        ones), its ``waiting`` jobs (``None`` for the other tasks). Groups: every
        group of a task in ``tasks`` with an active or waiting job, and every
        keyed group with an active job. The ``limit`` groups with most active come
        first (ties: most waiting, then task, then key, ``None`` first). A read for
        the surfaces: active jobs from the store's active-key index, waiting ones
        from one pass over the waiting jobs of ``tasks``."""

    @abc.abstractmethod
    async def rate_key_usage(
        self, rates: Mapping[str, RateLimit], limit: int = 100
    ) -> list[RateKeyUse]:
        """Per ``(task, rate_limit_key)`` window of a task in ``rates`` (the
        ``ClaimRequest.key_rate_limits`` the workers pass), its starts in
        ``(now - period, now]`` on the store's clock; windows without a start left
        out; the ``limit`` with most starts first (ties: task, then key, ``None``
        first). A read for the surfaces; it never trims the window log."""

    # -- circuits ----------------------------------------------------------
    @abc.abstractmethod
    async def list_circuits(self) -> list[CircuitInfo]: ...

    @abc.abstractmethod
    async def reset_circuit(self, task: str) -> None: ...

    @abc.abstractmethod
    async def clear_circuit_failures(self, task: str | None) -> None:
        """Forget the failures counted by the *closed* circuit of ``task`` (of every
        task when ``None``); an open or half-open circuit is left as it is."""

    # -- heartbeats --------------------------------------------------------
    @abc.abstractmethod
    async def record_heartbeat(self, worker: WorkerInfo) -> None:
        """Upsert the worker; ``last_seen`` is the backend's now."""

    @abc.abstractmethod
    async def list_workers(self) -> list[WorkerInfo]: ...

    @abc.abstractmethod
    async def remove_worker(self, worker_id: str) -> None: ...

    @abc.abstractmethod
    async def prune_workers(self, older_than: float) -> int:
        """Delete heartbeat rows whose ``last_seen`` is before ``now - older_than``
        (backend clock); returns how many."""

    # -- schedules ---------------------------------------------------------
    @abc.abstractmethod
    async def sync_schedules(
        self, specs: Sequence[ScheduleSpec], first_fires: Mapping[str, float | None]
    ) -> list[ScheduleRecord]:
        """Store the code's schedules; returns their records, in ``specs`` order.

        A new name is inserted with ``next_fire_at = first_fires[name]``. A stored
        schedule with the same fingerprint is left exactly as it is (pause,
        cron override, next fire, fire count survive restarts and deploys). A
        changed fingerprint replaces the definition, drops a cron override and
        sets ``next_fire_at = first_fires[name]``; ``paused`` and ``fires`` are kept.
        Concurrent calls from several schedulers are safe.
        """

    @abc.abstractmethod
    async def list_schedules(self) -> list[ScheduleRecord]:
        """Every stored schedule, by name."""

    @abc.abstractmethod
    async def update_schedule(
        self,
        name: str,
        *,
        paused: bool | None = None,
        cron: str | None = None,
        every: float | None = None,
        next_fire_at: float | None = None,
        reschedule: bool = False,
    ) -> ScheduleRecord | None:
        """Operator changes: ``paused`` when not ``None``; a new ``cron`` or
        ``every`` (an override; setting one clears the other); ``next_fire_at``
        replaced when ``reschedule`` is true. Returns the record, or ``None``
        when no schedule has that name."""

    @abc.abstractmethod
    async def advance_schedule(
        self, name: str, fired_at: float, next_fire_at: float | None, *, fired: bool = True
    ) -> bool:
        """Compare-and-set after a fire was enqueued: only when the stored
        ``next_fire_at`` still equals ``fired_at`` (exactly), set it to
        ``next_fire_at``, add 1 to ``fires`` and set ``last_fire_at = fired_at``.
        With ``fired=False`` (missed slots skipped by the misfire policy) only
        ``next_fire_at`` moves: ``fires`` and ``last_fire_at`` are left alone.
        A paused schedule moves too (the caller decides). Returns whether it
        moved (``False``: another scheduler or an operator already moved it)."""

    @abc.abstractmethod
    async def delete_schedules(self, names: Sequence[str]) -> int:
        """Forget these schedules; returns how many existed."""

    # -- job statistics (metrics and throughput history) --------------------
    @abc.abstractmethod
    async def record_job_stats(self, stats: Sequence[JobStat]) -> None:
        """Add these increments to the cumulative totals and to the series row
        of the current minute (backend clock), summing count, duration_sum and
        each bucket. Atomic per call; safe from many workers at once."""

    @abc.abstractmethod
    async def job_stat_totals(self) -> list[JobStat]:
        """Cumulative totals per ``(task, queue, status)`` (``minute`` is 0)."""

    @abc.abstractmethod
    async def job_stat_series(self, since: float) -> list[JobStat]:
        """Per-minute rows with ``minute >= since``, oldest first."""

    @abc.abstractmethod
    async def prune_job_stats(self, older_than: float) -> int:
        """Delete series rows whose minute is before ``now - older_than``
        (totals are never pruned); returns how many."""

    # -- conveniences built on the contract --------------------------------
    async def get_job(self, job_id: str) -> Job | None:
        jobs = await self.get_jobs([job_id])
        return jobs[0] if jobs else None

    async def __aenter__(self) -> Backend:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


@runtime_checkable
class TransactionalEnqueue(Protocol):
    """A backend that can insert jobs inside the caller's own open transaction,
    on the caller's own database connection (``app.enqueue(..., connection=conn)``):
    the jobs commit or roll back with the caller's data. Only PostgreSQL has it."""

    async def enqueue_jobs_on(self, connection: Any, jobs: Sequence[NewJob]) -> list[Job]: ...

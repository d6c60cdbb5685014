"""What ``conveyor bench`` measures, and the throwaway namespace it measures in.

A quick self-check of one machine and one backend, not a comparison with other
job queues (that is the repository's ``benchmarks/`` suite). Three figures, all
with a real :class:`~conveyor.worker.worker.Worker` in this process (its own
app, apart from the producer's):

1. enqueue throughput: ``enqueue_many`` of N no-op jobs in batches of 1,000;
2. drain throughput: one worker drains them, from its start to the last
   completion, both as the backend's clock stored them;
3. pickup latency: with the worker idle, one job at a time, from just before
   ``enqueue`` to the moment its handler starts.

The run never touches the user's data: :func:`scratch_for` gives it a fresh
namespace (a temporary SQLite file, a new PostgreSQL schema, a new Redis key
prefix) that :meth:`Scratch.remove` deletes afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import shutil
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from conveyor.app import Conveyor
from conveyor.backends.registry import scheme_of
from conveyor.context import JobContext
from conveyor.errors import BackendUnavailable, ConfigurationError, ConveyorError
from conveyor.job import Job, JobState
from conveyor.task import Handler

if TYPE_CHECKING:
    from conveyor.worker.worker import Worker

ENQUEUE_BATCH = 1_000
NOOP = "conveyor.bench.noop"
STAMP = "conveyor.bench.stamp"
STALL_LIMIT = 30.0
"""Seconds without any job finishing after which the run is declared stuck."""
IDLE_PAUSE = 0.25
"""Between the drain and the latency samples: the last settlements land and the
worker goes back to waiting for work, so the samples see an idle worker."""
PAGE = 5_000


class BenchError(ConveyorError):
    """The benchmark could not complete (a job failed, the worker stopped, nothing moved)."""


# -- the namespace -------------------------------------------------------------------


@dataclass
class Scratch:
    """Where the run happens, and how to remove it afterwards."""

    url: str
    backend: str
    """``sqlite``, ``postgresql``, ``redis`` or ``memory``."""
    where: str
    """The namespace, for the output: ``schema conveyor_bench_…, dropped afterwards``."""
    _remove: Callable[[], Awaitable[None]]
    remote: bool = False
    """On a server: removing it needs the server (local files are always removed)."""
    opened: bool = False
    """The app connected: from then on the namespace may hold something."""

    async def remove(self) -> None:
        """Delete everything the run stored. Raises a typed error when it cannot."""
        await self._remove()


async def _nothing() -> None:
    return None


def scratch_for(url: str | None) -> Scratch:
    """A fresh namespace on the backend of ``url`` (``None``: a temporary SQLite file).

    Raises :class:`ConfigurationError` for a URL that cannot be used, among them a
    SQLite file that already exists: the run would mix with, then delete, its data.
    """
    if url is None:
        folder = Path(tempfile.mkdtemp(prefix="conveyor-bench-"))

        async def remove_folder() -> None:
            await asyncio.to_thread(shutil.rmtree, folder, ignore_errors=True)

        return Scratch(
            f"sqlite:///{folder / 'bench.db'}",
            "sqlite",
            "a temporary SQLite file, deleted afterwards",
            remove_folder,
        )
    scheme = scheme_of(url)
    tag = uuid.uuid4().hex[:12]
    if scheme == "sqlite":
        return _sqlite_scratch(url)
    if scheme in ("postgresql", "postgres"):
        return _postgres_scratch(url, f"conveyor_bench_{tag}")
    if scheme in ("redis", "rediss"):
        return _redis_scratch(url, f"bench-{tag}")
    if scheme == "memory":
        return _memory_scratch(f"conveyor-bench-{tag}")
    # An unknown scheme: let the app refuse it with the usual message.
    return Scratch(url, scheme, url, _nothing)


def _memory_scratch(name: str) -> Scratch:
    from conveyor.backends.memory import drop_memory_store

    async def drop_store() -> None:
        drop_memory_store(name)

    # A named store: the producer and the worker (two apps) must share it.
    return Scratch(f"memory://{name}", "memory", "this process's memory", drop_store)


def _sqlite_scratch(url: str) -> Scratch:
    from conveyor.backends.sqlite.url import parse_url

    path = parse_url(url).path
    if path.exists():
        raise ConfigurationError(
            f"url: {path} already exists; conveyor bench writes jobs into its database "
            "and deletes the file afterwards, so it needs a file that does not exist yet "
            "(or leave --url out to use a temporary file)"
        )

    def unlink() -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)

    async def remove_file() -> None:
        await asyncio.to_thread(unlink)

    return Scratch(url, "sqlite", f"a new SQLite file ({path}), deleted afterwards", remove_file)


def _postgres_scratch(url: str, schema: str) -> Scratch:
    from conveyor.backends.postgres.url import parse_url

    parse_url(url)  # refuse a bad URL before anything is created
    own = with_option(url, "schema", schema)
    options = parse_url(own)

    async def drop_schema() -> None:
        import asyncpg

        from conveyor.backends.postgres.connection import DRIVER_ERRORS, raise_typed

        try:
            conn = await asyncpg.connect(options.dsn, timeout=options.connect_timeout)
            try:
                await conn.execute(f"DROP SCHEMA IF EXISTS {options.quoted_schema} CASCADE")
            finally:
                await conn.close()
        except DRIVER_ERRORS as exc:
            raise_typed(exc, f"dropping schema {options.schema}")

    return Scratch(
        own, "postgresql", f"schema {schema}, dropped afterwards", drop_schema, remote=True
    )


def _redis_scratch(url: str, prefix: str) -> Scratch:
    from conveyor.backends.redis.url import parse_url

    parse_url(url)
    own = with_option(url, "prefix", prefix)
    options = parse_url(own)

    async def delete_keys() -> None:
        from redis.asyncio import Redis, RedisCluster
        from redis.exceptions import RedisError

        from conveyor.backends.redis.keys import Keys

        factory: Any = RedisCluster if options.cluster else Redis
        client = factory.from_url(
            options.client_url, socket_connect_timeout=options.connect_timeout
        )
        try:
            pattern = Keys.for_prefix(options.prefix).pattern()
            doomed = [key async for key in client.scan_iter(match=pattern, count=10_000)]
            # Every key shares the prefix's hash tag: one slot, so multi-key DEL works
            # on a cluster too.
            for start in range(0, len(doomed), 500):
                await client.delete(*doomed[start : start + 500])
        except (RedisError, OSError) as exc:
            raise BackendUnavailable(
                f"redis: deleting the keys of prefix {options.prefix!r} failed: {exc}"
            ) from exc
        finally:
            with contextlib.suppress(Exception):
                await client.aclose()

    return Scratch(
        own, "redis", f"key prefix {prefix}, keys deleted afterwards", delete_keys, remote=True
    )


def with_option(url: str, key: str, value: str) -> str:
    """``url`` with its query option ``key`` set to ``value`` (replacing any given)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != key]
    query.append((key, value))
    return urlunsplit(parts._replace(query=urlencode(query)))


def masked(url: str) -> str:
    """``url`` with its password, if any, shown as ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


# -- the figures ---------------------------------------------------------------------


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest rank: a value that was actually measured, never an interpolation."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True, slots=True)
class Figures:
    jobs: int
    concurrency: int
    enqueue_seconds: float
    drain_seconds: float
    pickups: tuple[float, ...]
    """Pickup latency of each sample, in seconds, in the order measured."""

    @property
    def enqueue_per_s(self) -> float:
        return self.jobs / self.enqueue_seconds

    @property
    def drain_per_s(self) -> float:
        return self.jobs / self.drain_seconds

    def pickup_ms(self) -> dict[str, float]:
        ms = [p * 1000 for p in self.pickups]
        return {
            "p50": percentile(ms, 50),
            "p90": percentile(ms, 90),
            "p99": percentile(ms, 99),
            "max": max(ms),
        }


class _Probe:
    """The benchmark's two tasks and what the app's events tell about them."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.drained = 0
        self.all_drained = asyncio.Event()
        self.sample_done = asyncio.Event()
        self.pickups: list[float] = []
        self.failure: str | None = None

    def install(self, app: Conveyor) -> None:
        probe = self

        class Noop(Handler):
            name = NOOP

            async def process(self, ctx: JobContext, payload: Any) -> None:
                return None

        class Stamp(Handler):
            name = STAMP

            async def process(self, ctx: JobContext, payload: Any) -> None:
                probe.pickups.append(time.time() - float(payload["at"]))

        app.register(Noop())
        app.register(Stamp())
        app.on("completed", self._completed)
        app.on("dead", self._dead)

    def _completed(self, event: str, job: Job, **data: Any) -> None:
        if job.task == NOOP:
            self.drained += 1
            if self.drained >= self.jobs:
                self.all_drained.set()
        elif job.task == STAMP:
            self.sample_done.set()

    def _dead(self, event: str, job: Job, **data: Any) -> None:
        error = data.get("error")
        detail = f"{error.type}: {error.message}" if error is not None else data.get("reason")
        self.failure = f"job {job.id} ({job.task}) failed: {detail}"
        self.all_drained.set()
        self.sample_done.set()

    def progress(self) -> int:
        return self.drained + len(self.pickups)


async def _until(
    done: asyncio.Event, probe: _Probe, running: asyncio.Task[None], what: str
) -> None:
    """Wait for ``done``; fail when a job failed, the worker stopped, or nothing
    finished for :data:`STALL_LIMIT` seconds."""
    seen, since = probe.progress(), time.monotonic()
    waiter = asyncio.ensure_future(done.wait())
    try:
        while not done.is_set():
            await asyncio.wait({waiter, running}, timeout=1.0, return_when="FIRST_COMPLETED")
            if done.is_set():
                break
            if running.done():
                running.result()  # the worker's own error, if it crashed
                raise BenchError(f"the worker stopped before {what}")
            if probe.progress() != seen:
                seen, since = probe.progress(), time.monotonic()
            elif time.monotonic() - since > STALL_LIMIT:
                raise BenchError(f"no job finished for {STALL_LIMIT:.0f}s while waiting for {what}")
    finally:
        waiter.cancel()
    if probe.failure is not None:
        raise BenchError(probe.failure)


async def _enqueue(app: Conveyor, jobs: int) -> float:
    started = time.perf_counter()
    for start in range(0, jobs, ENQUEUE_BATCH):
        await app.enqueue_many([(NOOP, None)] * min(ENQUEUE_BATCH, jobs - start))
    return time.perf_counter() - started


async def _drain(
    app: Conveyor, probe: _Probe, worker: Worker, running: asyncio.Task[None]
) -> float:
    await _until(probe.all_drained, probe, running, f"{probe.jobs} jobs to complete")
    # The completed event fires before the outcome is stored; the figure ends at
    # the last stored completion, as the backend's clock recorded it.
    deadline = time.monotonic() + STALL_LIMIT
    while await app.count_jobs(JobState.COMPLETED) < probe.jobs:
        if time.monotonic() > deadline:
            raise BenchError(f"the completions were not stored within {STALL_LIMIT:.0f}s")
        await asyncio.sleep(0.02)
    last, offset = 0.0, 0
    while True:
        page = await app.list_jobs(JobState.COMPLETED, limit=PAGE, offset=offset)
        last = max([last, *(job.finished_at or 0.0 for job in page)])
        if len(page) < PAGE:
            break
        offset += len(page)
    # worker.started_at is the backend's clock too (read as the worker started).
    return last - worker.started_at


async def _pickups(
    app: Conveyor, probe: _Probe, samples: int, running: asyncio.Task[None]
) -> tuple[float, ...]:
    await asyncio.sleep(IDLE_PAUSE)
    for n in range(samples):
        probe.sample_done.clear()
        job = await app.enqueue(STAMP, {"at": time.time()})
        await _until(probe.sample_done, probe, running, f"latency sample {n + 1}")
        # Stored too before the next one: the worker is idle again.
        await app.wait_for_job(job.id, timeout=STALL_LIMIT)
    return tuple(probe.pickups)


async def measure(
    scratch: Scratch,
    *,
    jobs: int,
    samples: int,
    concurrency: int,
    report: Callable[[str], None] = lambda phase: None,
) -> Figures:
    """Run the three measurements in ``scratch``; the caller removes it afterwards."""
    if jobs < 1 or samples < 1 or concurrency < 1:
        raise ValueError("jobs, samples and concurrency must be at least 1")
    # Producer and worker are two apps, each with its own backend connections, as
    # in production: a new job reaches the worker the way it would reach a worker
    # process (SQLite's commit watcher, LISTEN/NOTIFY, pub/sub), not through the
    # shortcut a backend takes to wake waiters that share it.
    producer, consumer = Conveyor(scratch.url), Conveyor(scratch.url)
    probe = _Probe(jobs)
    probe.install(consumer)
    # No maintenance: retention could delete the completed jobs the drain figure is
    # read from, and a fresh namespace has no stalled jobs to find.
    worker = consumer.worker(concurrency=concurrency, install_signals=False, maintenance=False)
    running: asyncio.Task[None] | None = None
    try:
        report("connecting")
        await producer.connect()  # migrations happen here, outside every figure
        scratch.opened = True
        await consumer.connect()
        report(f"enqueueing {jobs:,} jobs")
        enqueue_seconds = await _enqueue(producer, jobs)
        report(f"draining {jobs:,} jobs (concurrency {concurrency})")
        running = asyncio.create_task(worker.run())
        drain_seconds = await _drain(producer, probe, worker, running)
        report(f"measuring pickup latency ({samples} jobs, one at a time)")
        pickups = await _pickups(producer, probe, samples, running)
    finally:
        if running is not None:
            worker.stop(force=True)
            await asyncio.gather(running, return_exceptions=True)
        await consumer.close()
        await producer.close()
    return Figures(jobs, concurrency, enqueue_seconds, drain_seconds, pickups)

"""Rate limits per key with real worker processes: two workers share each key's
window (5 starts per second), checked from what the handlers recorded; a key's
backlog does not slow the other keys."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from chaos_helpers import CHAOS_STORES, Cluster, get_jobs, report

from conveyor.job import JobState

pytestmark = pytest.mark.slow

LIMIT, PERIOD = 5, 1.0
#: How much later than its claim a handler may start: the handlers' own clock
#: readings are checked over windows this much shorter than the period.
START_JITTER = 0.25
#: Three busy keys, three windows' worth each (about 2 s of starts), and one
#: light key that fits in its first window.
BUSY = {f"busy-{k}": 3 * LIMIT for k in range(3)}
LIGHT = {"light": 3}


def most_in_any_window(starts: list[float], period: float) -> int:
    """The most starts inside any sliding window of ``period`` seconds."""
    starts = sorted(starts)
    most = first = 0
    for last, at in enumerate(starts):
        while at - starts[first] >= period:
            first += 1
        most = max(most, last - first + 1)
    return most


@pytest.mark.timeout(180)
@pytest.mark.parametrize("store", CHAOS_STORES)
async def test_rate_key_windows_hold_across_two_workers(tmp_path: Path, store: str) -> None:
    async with Cluster(tmp_path, store) as cluster:
        app = await cluster.app()
        counts = {**BUSY, **LIGHT}
        items = [("chaos.rated", {"key": key}, {}) for key, n in counts.items() for _ in range(n)]
        jobs = await app.enqueue_many(items)
        assert {job.rate_limit_key for job in jobs} == set(counts)
        for _ in range(2):
            cluster.start_worker(10)

        async def drained() -> bool:
            return await app.count_jobs(JobState.COMPLETED, task="chaos.rated") == len(jobs)

        await cluster.wait_until(drained, 120, "the rate-keyed jobs did not all run", 0.1)
        stored = await get_jobs(app, [job.id for job in jobs])
        runs = [run for run in cluster.runs() if run.task == "chaos.rated"]
        claimed: dict[str, list[float]] = defaultdict(list)  # key -> claim times (store clock)
        started: dict[str, list[float]] = defaultdict(list)  # key -> handler starts (host clock)
        key_of = {job.id: job.rate_limit_key for job in jobs}
        for job in stored.values():
            claimed[job.result["key"]].append(job.result["claimed_at"])
        for run in runs:
            started[key_of[run.job_id] or ""].append(run.started)
        peaks = {key: most_in_any_window(times, PERIOD) for key, times in claimed.items()}
        handler_peak = max(
            most_in_any_window(times, PERIOD - START_JITTER) for times in started.values()
        )
        first = min(min(times) for times in claimed.values())
        spans = {key: max(times) - first for key, times in claimed.items()}
        report(
            f"rate limit per key ({len(counts)} keys at {LIMIT}/s), 2 workers",
            store,
            jobs=len(jobs),
            faults=0,
            lost=len(jobs) - len(stored),
            duplicated=len(runs) - len(jobs),
            bound=0,
            passed=max(peaks.values()) <= LIMIT,
            note=f"peak starts per key per window {max(peaks.values())} (limit {LIMIT}), "
            f"by the handlers' clocks {handler_peak} (windows of {PERIOD - START_JITTER:g} s); "
            f"last busy start "
            f"{max(spans[k] for k in BUSY):.2f} s",
        )
        assert len(runs) == len(jobs)
        assert all(peak <= LIMIT for peak in peaks.values()), peaks
        assert handler_peak <= LIMIT, started
        # Each busy key reached its limit, and needed its three windows.
        assert all(peaks[key] == LIMIT for key in BUSY), peaks
        assert all(spans[key] >= 2 * PERIOD * 0.98 for key in BUSY), spans
        # The keys ran side by side: 45 busy starts would need 9 windows in one
        # shared window; the light key started in the first window.
        assert max(spans[key] for key in BUSY) < 5 * PERIOD, spans
        assert spans["light"] < PERIOD, spans

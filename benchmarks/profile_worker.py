#!/usr/bin/env python3
"""Where a conveyor worker spends its time: py-spy on the worker process of W1.

    pip install py-spy        # into the venv; it is not a project dependency
    python benchmarks/profile_worker.py --jobs 100000
    python benchmarks/profile_worker.py --task bench.sleep --jobs 5000
    python benchmarks/profile_worker.py --enqueue     # profile the producer instead

Enqueues the jobs into a fresh SQLite file, starts the worker exactly as run.py
does, samples every thread with ``py-spy record --threads`` until the jobs are
done, and prints the hottest frames per thread (self time) and the hottest
conveyor functions (inclusive). The raw collapsed stacks stay in ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.conveyor_side import ConveyorSide  # noqa: E402  (needs ROOT on sys.path first)

ENQUEUE_SCRIPT = """
import asyncio, sys, time
from conveyor import Conveyor
app = Conveyor(sys.argv[1])
async def main():
    await app.connect()
    n, t0 = int(sys.argv[2]), time.perf_counter()
    for _ in range(n // 5000):
        await app.enqueue_many([("bench.noop", None)] * 5000)
    print(f"enqueue: {n / (time.perf_counter() - t0):,.0f} jobs/s")
    await app.close()
asyncio.run(main())
"""


def py_spy() -> str:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        sys.exit("py-spy is not installed: pip install py-spy (into the venv, not pyproject)")
    return exe


def report(raw: Path, top: int) -> None:
    per_thread: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    inclusive: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        thread = frames[0]
        threads[thread] += n
        per_thread[thread][frames[-1]] += n
        for name in {re.sub(r":\d+\)$", ")", f) for f in frames[1:]}:
            if "conveyor/" in name:
                inclusive[name] += n
    if not total:
        print("no samples")
        return
    print(f"\n{total} samples; % of all samples, all threads together")
    for thread, n in threads.most_common():
        print(f"\n{100 * n / total:5.1f}%  {thread}")
        for frame, m in per_thread[thread].most_common(top):
            print(f"    {100 * m / total:5.1f}%  {frame}")
    print("\nconveyor functions, inclusive:")
    for name, n in inclusive.most_common(top * 2):
        print(f"    {100 * n / total:5.1f}%  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--task", default="bench.noop", help="bench.noop or bench.sleep")
    parser.add_argument("--enqueue", action="store_true", help="profile enqueue_many instead")
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/profile.raw"))
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    spy = py_spy()
    record = [spy, "record", "-r", str(args.rate), "--threads", "-f", "raw", "-o", str(args.out)]

    workdir = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    try:
        side = ConveyorSide(workdir)
        if args.enqueue:
            cmd = [*record, "--", sys.executable, "-c", ENQUEUE_SCRIPT, side.url, str(args.jobs)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            print("".join(line for line in out.splitlines(True) if line.startswith("enqueue")))
        else:
            side.enqueue_bulk(args.task, args.jobs)
            proc = side.start_worker()
            sampler = subprocess.Popen(
                [*record, "--nonblocking", "--pid", str(proc.popen.pid)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                side.wait_done(args.jobs, proc)
            finally:
                sampler.send_signal(signal.SIGINT)
                sampler.wait(60)
                proc.stop()
            first, last = side.window()
            print(f"drained {args.jobs:,} jobs at {args.jobs / (last - first):,.0f} jobs/s")
        side.close()
        time.sleep(0.1)
        report(args.out, args.top)
        print(f"\nraw collapsed stacks: {args.out}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

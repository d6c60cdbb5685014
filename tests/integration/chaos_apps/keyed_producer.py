"""A producer that retries with the same idempotency keys through store faults.

Run: ``python -m tests.integration.chaos_apps.keyed_producer --out acks.txt
--count 300 --seed 1`` with ``CONVEYOR_URL`` set. It enqueues the keys
``key-0`` .. ``key-<count-1>`` in an order shuffled by ``--seed`` (single
enqueues, and every tenth call a batch of five), and retries a call that
raised with the very same keys until it is acknowledged: what a careful
caller does after an ambiguous failure (the store may or may not have
stored the jobs before the connection broke).

Each acknowledged job is a line ``ok <key> <job id> <duplicate 0/1>`` (with
``--stamp``, then the time the call returned); each failed call is
``err <ErrorType>``. ``--tag T`` names the keys ``Tkey-<i>`` (producers with
different tags share no key); ``--concurrency N`` keeps N calls in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from conveyor.app import Conveyor
from conveyor.job import Job

#: Pause before retrying a failed call.
RETRY_PAUSE = 0.05


async def call(app: Conveyor, keys: list[str], seed: int) -> list[Job]:
    items: list[tuple[str, Any, dict[str, Any]]] = [
        ("chaos.sleep", {"seconds": 0.005, "key": key, "producer": seed}, {"idempotency_key": key})
        for key in keys
    ]
    if len(items) == 1:
        task, payload, options = items[0]
        return [await app.enqueue(task, payload, **options)]
    return await app.enqueue_many(items)


async def produce(
    out: Path, count: int, seed: int, tag: str = "", concurrency: int = 1, stamp: bool = False
) -> None:
    rng = random.Random(seed)
    keys = [f"{tag}key-{i}" for i in range(count)]
    rng.shuffle(keys)
    batches: list[list[str]] = []
    sent = 0
    while sent < count:
        size = min(5 if len(batches) % 10 == 9 else 1, count - sent)
        batches.append(keys[sent : sent + size])
        sent += size
    todo = iter(batches)
    seen: set[str] = set()
    app = Conveyor()

    async def caller(log: TextIO) -> None:
        for batch in todo:  # shared: each caller takes the next batch
            while True:
                try:
                    jobs = await call(app, batch, seed)
                    break
                except Exception as exc:  # every kind is logged; the test judges
                    kind = type(exc).__name__
                    if kind not in seen:  # the first of each kind, in full
                        seen.add(kind)
                        print(f"{kind}: {exc}", file=sys.stderr, flush=True)
                    log.write(f"err {kind}\n")
                    log.flush()
                    await asyncio.sleep(RETRY_PAUSE)
            when = f" {time.time():.6f}" if stamp else ""
            log.write(
                "".join(
                    f"ok {key} {job.id} {int(job.duplicate)}{when}\n"
                    for key, job in zip(batch, jobs, strict=True)
                )
            )
            log.flush()

    try:
        with out.open("a", encoding="utf-8") as log:
            await asyncio.gather(*(caller(log) for _ in range(concurrency)))
    finally:
        await app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tag", default="", help="what each key starts with")
    parser.add_argument("--concurrency", type=int, default=1, help="calls in flight at once")
    parser.add_argument("--stamp", action="store_true", help="end each ok line with its time")
    args = parser.parse_args()
    asyncio.run(produce(args.out, args.count, args.seed, args.tag, args.concurrency, args.stamp))


if __name__ == "__main__":
    main()

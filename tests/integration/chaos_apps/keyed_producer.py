"""A producer that retries with the same idempotency keys through store faults.

Run: ``python -m tests.integration.chaos_apps.keyed_producer --out acks.txt
--count 300 --seed 1`` with ``CONVEYOR_URL`` set. It enqueues the keys
``key-0`` .. ``key-<count-1>`` in an order shuffled by ``--seed`` (single
enqueues, and every tenth call a batch of five), and retries a call that
raised with the very same keys until it is acknowledged: what a careful
caller does after an ambiguous failure (the store may or may not have
stored the jobs before the connection broke).

Each acknowledged job is a line ``ok <key> <job id> <duplicate 0/1>``; each
failed call is ``err <ErrorType>``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
from pathlib import Path
from typing import Any

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


async def produce(out: Path, count: int, seed: int) -> None:
    rng = random.Random(seed)
    keys = [f"key-{i}" for i in range(count)]
    rng.shuffle(keys)
    app = Conveyor()
    sent = calls = 0
    try:
        with out.open("a", encoding="utf-8") as log:
            while sent < count:
                size = min(5 if calls % 10 == 9 else 1, count - sent)
                batch = keys[sent : sent + size]
                while True:
                    try:
                        jobs = await call(app, batch, seed)
                        break
                    except Exception as exc:  # every kind is logged; the test judges
                        log.write(f"err {type(exc).__name__}\n")
                        log.flush()
                        await asyncio.sleep(RETRY_PAUSE)
                log.write(
                    "".join(
                        f"ok {key} {job.id} {int(job.duplicate)}\n"
                        for key, job in zip(batch, jobs, strict=True)
                    )
                )
                log.flush()
                sent += size
                calls += 1
    finally:
        await app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(produce(args.out, args.count, args.seed))


if __name__ == "__main__":
    main()

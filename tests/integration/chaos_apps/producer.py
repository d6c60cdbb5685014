"""A producer process: enqueue ``--count`` jobs, mixing single enqueues and
``enqueue_many`` batches, and append every acknowledged job id to ``--out``.

Run: ``python -m tests.integration.chaos_apps.producer --out ids.txt --count 2000``
with ``CONVEYOR_URL`` set. An id is written only after the enqueue returned it,
so the file lists exactly the acknowledged enqueues (G1, G9). Each payload
names its batch and the batch's size, so a torn batch can be spotted.

With ``--keys``, job ``i`` carries the idempotency key ``key-<i>`` (in an order
shuffled by ``--seed``) and each line is ``<key> <job id> <duplicate 0/1>`` (G7).
``--attempts N`` enqueues every job with ``attempts=N``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
from pathlib import Path

from conveyor.app import Conveyor


async def produce(
    out: Path, count: int, seed: int, seconds: float, keys: bool, attempts: int | None
) -> None:
    rng = random.Random(seed)
    order = list(range(count))
    if keys:
        rng.shuffle(order)
    app = Conveyor()
    sent = batch = 0
    try:
        with out.open("a", encoding="utf-8") as acked:
            while sent < count:
                size = 1 if rng.random() < 0.95 else rng.randint(20, 100)
                size = min(size, count - sent)
                items = []
                for i in order[sent : sent + size]:
                    payload = {"seconds": seconds, "producer": seed, "batch": batch, "size": size}
                    options: dict[str, object] = {"idempotency_key": f"key-{i}"} if keys else {}
                    if attempts is not None:
                        options["attempts"] = attempts
                    items.append(("chaos.sleep", payload, options))
                if size == 1:
                    jobs = [await app.enqueue(items[0][0], items[0][1], **items[0][2])]
                else:
                    jobs = await app.enqueue_many(items)
                if keys:
                    lines = [
                        f"key-{i} {job.id} {int(job.duplicate)}\n"
                        for i, job in zip(order[sent : sent + size], jobs, strict=True)
                    ]
                else:
                    lines = [f"{job.id}\n" for job in jobs]
                acked.write("".join(lines))
                acked.flush()
                sent += size
                batch += 1
    finally:
        await app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--keys", action="store_true", help="use idempotency keys key-<i>")
    parser.add_argument("--attempts", type=int, help="each job's attempts (the task's default)")
    args = parser.parse_args()
    asyncio.run(produce(args.out, args.count, args.seed, args.seconds, args.keys, args.attempts))


if __name__ == "__main__":
    main()

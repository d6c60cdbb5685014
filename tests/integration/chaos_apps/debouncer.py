"""A debounce storm producer: ``--count`` debounced enqueues of ``chaos.debounced``
spread over ``--keys`` idempotency keys, each line of ``--out`` written after
its enqueue returned: ``<key> <producer> <n> <job id>``.

Run: ``python -m tests.integration.chaos_apps.debouncer --out f --count 500 --producer 1``
with ``CONVEYOR_URL`` set.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from conveyor.app import Conveyor


async def storm(out: Path, count: int, keys: int, producer: int, debounce: float) -> None:
    app = Conveyor()
    try:
        with out.open("a", encoding="utf-8") as acked:
            for n in range(count):
                key = f"k{(n + producer) % keys}"
                job = await app.enqueue(
                    "chaos.debounced",
                    {"key": key, "producer": producer, "n": n},
                    idempotency_key=key,
                    debounce=debounce,
                )
                acked.write(f"{key} {producer} {n} {job.id}\n")
                acked.flush()
    finally:
        await app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--producer", type=int, required=True)
    parser.add_argument("--debounce", type=float, default=1.0)
    args = parser.parse_args()
    asyncio.run(storm(args.out, args.count, args.keys, args.producer, args.debounce))


if __name__ == "__main__":
    main()

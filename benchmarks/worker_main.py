"""Run a conveyor worker when the ``conveyor`` CLI is not there yet.

    python -m benchmarks.worker_main benchmarks.apps.conveyor_app:app -c 50

run.py prefers ``python -m conveyor worker APP -c 50`` whenever it works.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("app", help="module:attribute of a Conveyor app")
    parser.add_argument("-c", "--concurrency", type=int, default=50)
    args = parser.parse_args()
    module_name, _, attr = args.app.partition(":")
    app = getattr(importlib.import_module(module_name), attr or "app")
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(app.worker(concurrency=args.concurrency).run())


if __name__ == "__main__":
    main()

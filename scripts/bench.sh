#!/usr/bin/env bash
# Benchmarks, conveyor vs its peers (benchmarks/README.md). Never part of the test gate.
#   scripts/bench.sh                         SQLite vs Huey, 3 repetitions, medians
#   scripts/bench.sh --backend redis         Redis vs arq, SAQ, taskiq, Dramatiq, Huey, Celery, RQ
#   scripts/bench.sh --backend postgres      PostgreSQL (127.0.0.1:5432) vs procrastinate
#   scripts/bench.sh --only w1 --repeat 1    arguments go to benchmarks/run.py
# Results also go to benchmarks/results/latest.json (git-ignored) unless --json is given.
set -euo pipefail

# shellcheck source=scripts/_common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/_common.sh"
cd "$ROOT"
ensure_venv "all,dev,bench"
# arq pins redis<6 while conveyor tracks the current redis-py (arq runs fine on it),
# so it stays out of the bench extra and comes without its pins.
"$PY" -c 'import arq' >/dev/null 2>&1 || _pip install -q --no-deps 'arq>=0.26'

args=("$@")
if [[ " ${args[*]} " != *" --json "* ]]; then
    args+=(--json benchmarks/results/latest.json)
fi
exec "$PY" benchmarks/run.py "${args[@]}"

#!/usr/bin/env bash
# Benchmarks, conveyor vs Huey (benchmarks/README.md). Never part of the test gate.
#   scripts/bench.sh                         everything, 3 repetitions, medians
#   scripts/bench.sh --only w1 --repeat 1    arguments go to benchmarks/run.py
# Results also go to benchmarks/results/latest.json (git-ignored) unless --json is given.
set -euo pipefail

# shellcheck source=scripts/_common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/_common.sh"
cd "$ROOT"
ensure_venv "all,dev,bench"

args=("$@")
if [[ " ${args[*]} " != *" --json "* ]]; then
    args+=(--json benchmarks/results/latest.json)
fi
exec "$PY" benchmarks/run.py "${args[@]}"

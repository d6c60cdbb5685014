#!/usr/bin/env bash
# The chaos suite and its report (docs/reliability.md):
#   1. every chaos test (tests/integration/test_chaos_*.py) as CI runs them (quick);
#   2. the long variants (CONVEYOR_CHAOS_LONG=1: a minute or more of repeated
#      worker kills per store, alone and under --processes; six restarts of a
#      private Redis and PostgreSQL under 3,000 idempotency keys; three Redis
#      failovers under 8,000 keys; the per-key cap and the debounce storm at
#      twice and six times their CI sizes; three minutes of a slow, lossy link
#      to one worker host; three worker hosts draining 100,000 jobs);
#   3. docs/reliability.md from the figures the tests wrote. A failing row, or a
#      failing test, fails the script.
#
#   scripts/chaos.sh            all of it
#   scripts/chaos.sh --quick    only the quick variants (still writes the report)
#
# Environment:
#   CONVEYOR_CHAOS_SECONDS=60   seconds of kills per long test
#   CONVEYOR_VENV               the virtual environment to use (default .venv;
#                               create it with scripts/test.sh or make test)
# PostgreSQL and Redis come from scripts/services.sh (running ones, or temporary).
# The storage tests mount a tmpfs and the partition, slow-link and three-host
# tests make network namespaces: run as root (as CI does), or they fail.
set -euo pipefail

# shellcheck source=scripts/_common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/_common.sh"
# shellcheck source=scripts/services.sh
source "$ROOT/scripts/services.sh"
cd "$ROOT"

quick=""
[[ "${1:-}" == "--quick" ]] && quick=1
[[ -x "$PY" ]] || die "no virtual environment at $VENV: run scripts/test.sh once, or set CONVEYOR_VENV"

sampler=""
stop_sampler() {
    [[ -n "$sampler" ]] || return 0
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    sampler=""
}
trap 'stop_sampler; services_down' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
ensure_postgres
ensure_redis
ensure_faketime
ensure_nftables
export CONVEYOR_TEST_POSTGRES_URL CONVEYOR_TEST_REDIS_URL
export CONVEYOR_REQUIRE_SERVICES=1
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"

rows="$(mktemp -t conveyor-chaos.XXXXXX.jsonl)"
export CONVEYOR_CHAOS_REPORT="$rows"
# The host's load while the suite ran (it shares the CPU with whatever else
# runs): the 1-minute load average every 30 s, for the report's header.
loads="$(mktemp -t conveyor-chaos-load.XXXXXX)"
( while :; do cut -d' ' -f1 /proc/loadavg >>"$loads"; sleep 30; done ) &
sampler=$!
started_at="$(date -u +%H:%M)"
started_s="$(date +%s)"
rc=0
log "chaos tests, quick variants"
run_fg "$PY" -m pytest -q -p no:cacheprovider -ra tests/integration/test_chaos_*.py || rc=$?
if [[ -z "$quick" ]]; then
    log "chaos tests, long variants (${CONVEYOR_CHAOS_SECONDS:-60}s of kills each)"
    CONVEYOR_CHAOS_LONG=1 run_fg "$PY" -m pytest -q -p no:cacheprovider -ra \
        tests/integration/test_chaos_kills.py tests/integration/test_chaos_restarts.py \
        tests/integration/test_chaos_failover.py tests/integration/test_chaos_flow.py \
        tests/integration/test_chaos_slow_link.py tests/integration/test_chaos_hosts.py || rc=$?
fi

stop_sampler
minutes=$(( ($(date +%s) - started_s + 30) / 60 ))
load="$(sort -n "$loads" | awk '{v[NR]=$1} END {if (NR) printf "median %s, max %s over %d samples", v[int((NR+1)/2)], v[NR], NR}')"
kind="full"
[[ -n "$quick" ]] && kind="quick (--quick)"
note="Every row from one $kind \`scripts/chaos.sh\` run, $started_at-$(date -u +%H:%M) UTC ($minutes min), on $(nproc) cores shared with other work: 1-minute load average ${load:-not sampled} (every 30 s)."
log "docs/reliability.md"
report_rc=0
"$PY" scripts/chaos_report.py "$rows" docs/reliability.md --pytest-rc "$rc" --note "$note" || report_rc=$?
rm -f "$rows" "$loads"
[[ $report_rc == 0 ]] || die "the chaos report has failures (see docs/reliability.md)"
ok "chaos: every row passed"

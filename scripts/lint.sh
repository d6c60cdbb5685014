#!/usr/bin/env bash
# ruff check, ruff format --check and mypy (strict), as scripts/test.sh runs them.
#   scripts/lint.sh          check
#   scripts/lint.sh --fix    let ruff fix what it can and format, then check
set -euo pipefail

# shellcheck source=scripts/_common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/_common.sh"
cd "$ROOT"
ensure_venv "all,dev,bench"

if [[ "${1:-}" == "--fix" ]]; then
    "$VENV/bin/ruff" check --fix .
    "$VENV/bin/ruff" format .
fi
rc=0
log "ruff check" && { "$VENV/bin/ruff" check . || rc=1; }
log "ruff format --check" && { "$VENV/bin/ruff" format --check . || rc=1; }
log "mypy (strict)" && { "$VENV/bin/mypy" || rc=1; }
[[ $rc == 0 ]] || die "lint failed"
ok "lint clean"

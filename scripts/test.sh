#!/usr/bin/env bash
# The whole gate, exactly what CI runs (.ci/run calls this):
#   install (.venv, -e '.[all,dev,bench]') -> ruff check -> ruff format --check -> mypy
#   -> PostgreSQL + Redis for the tests -> pytest tests/ (junit xml in test-artifacts/)
#   -> the Django backend's tests on Django 6 (scripts/test-django6.sh) when a
#      Python >= 3.12 is present
#
#   scripts/test.sh                      everything
#   scripts/test.sh tests/unit -k retry  the same gate, pytest limited to these arguments
#
# Environment (see docs/how-to/testing.md):
#   CONVEYOR_SKIP_LINT=1           skip ruff and mypy (refused under CI)
#   CONVEYOR_FORCE_OWN_SERVICES=1  always start temporary PostgreSQL/Redis servers
#   CONVEYOR_TEST_TIMEOUT=1680     seconds pytest may run in all before it is stopped
#   CONVEYOR_REINSTALL=1           reinstall dependencies even if pyproject.toml is unchanged
set -euo pipefail

# shellcheck source=scripts/_common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/_common.sh"
# shellcheck source=scripts/services.sh
source "$ROOT/scripts/services.sh"
# shellcheck source=scripts/browser.sh
source "$ROOT/scripts/browser.sh"
cd "$ROOT"

trap services_down EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

START=$SECONDS
FAILED=()
TIMINGS=()

# step NAME COMMAND...: run it, time it, remember a failure and go on.
step() {
    local name="$1" t0=$SECONDS rc=0
    shift
    log "$name"
    "$@" || rc=$?
    TIMINGS+=("$(printf '%-22s %4ss  %s' "$name" $((SECONDS - t0)) "$([[ $rc == 0 ]] && echo ok || echo "FAILED (exit $rc)")")")
    [[ $rc == 0 ]] || FAILED+=("$name")
    return 0
}

if is_ci; then
    log "CI=$CI: services are required, lint is required, no test may be skipped for a missing service"
    [[ -z "${CONVEYOR_SKIP_LINT:-}" ]] || die "CONVEYOR_SKIP_LINT is not allowed under CI"
fi

t0=$SECONDS
ensure_venv "all,dev,bench"
TIMINGS+=("$(printf '%-22s %4ss  ok' install $((SECONDS - t0)))")

if [[ -z "${CONVEYOR_SKIP_LINT:-}" ]]; then
    step "ruff check" "$VENV/bin/ruff" check .
    step "ruff format --check" "$VENV/bin/ruff" format --check .
    step "mypy (strict)" "$VENV/bin/mypy"
fi

t0=$SECONDS
services_up
TIMINGS+=("$(printf '%-22s %4ss  ok' services $((SECONDS - t0)))")
t0=$SECONDS
ensure_browser
TIMINGS+=("$(printf '%-22s %4ss  ok' browser $((SECONDS - t0)))")
export CONVEYOR_TEST_POSTGRES_URL CONVEYOR_TEST_REDIS_URL
export CONVEYOR_REQUIRE_SERVICES=1 # tests/conftest.py: a missing service fails, never skips

mkdir -p test-artifacts
pytest_args=(-q -ra --junitxml=test-artifacts/junit.xml --durations=10)
if [[ $# -gt 0 ]]; then pytest_args+=("$@"); else pytest_args+=(tests); fi

run_pytest() {
    local rc=0
    run_fg timeout --signal=INT --kill-after=30 "${CONVEYOR_TEST_TIMEOUT:-1680}" \
        "$PY" -m pytest "${pytest_args[@]}" || rc=$?
    case $rc in
    0) return 0 ;;
    5) printf '%serror: pytest collected no tests: that is a failure here%s\n' "$_RED" "$_RESET" >&2 ;;
    124 | 137) printf '%serror: pytest ran over CONVEYOR_TEST_TIMEOUT=%ss and was stopped%s\n' \
        "$_RED" "${CONVEYOR_TEST_TIMEOUT:-1680}" "$_RESET" >&2 ;;
    esac
    return "$rc"
}
step "pytest" run_pytest

# Django >= 6's built-in django.tasks needs Python >= 3.12 (the project's own may
# be 3.11): run the Django backend's tests there too when such a Python exists.
python312() {
    local candidate
    for candidate in python3.13 python3.12 \
        "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python \
        "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}
if [[ $# -eq 0 ]]; then
    if django_python="$(python312)"; then
        step "django 6 (built-in tasks)" env PYTHON="$django_python" bash scripts/test-django6.sh
    else
        warn "no Python >= 3.12 here: Django 6's built-in django.tasks not tested (the backport was)"
    fi
fi

echo
log "summary ($((SECONDS - START))s in all)"
printf '    %s\n' "${TIMINGS[@]}"
if [[ ${#FAILED[@]} -gt 0 ]]; then
    die "failed: ${FAILED[*]}"
fi
ok "all green"

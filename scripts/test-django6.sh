#!/usr/bin/env bash
# The Django Tasks backend's tests on Django >= 6's built-in django.tasks, which
# needs Python >= 3.12 (scripts/test.sh runs them on the project's Python with
# the django_tasks backport, then call this one when a Python >= 3.12 is present).
# It builds its own venv.
#
#   scripts/test-django6.sh              PYTHON: python3.12+ (default: python3.13,
#                                        python3.12, or pyenv's 3.12/3.13)
#   CONVEYOR_DJANGO6_VENV=DIR            where the venv goes (default .venv-django6)
set -euo pipefail

# shellcheck source=scripts/_common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/_common.sh"
# shellcheck source=scripts/services.sh
source "$ROOT/scripts/services.sh"
cd "$ROOT"
trap services_down EXIT

python="${PYTHON:-}"
if [[ -z "$python" ]]; then
    for candidate in python3.13 python3.12 \
        "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python \
        "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python; do
        if command -v "$candidate" >/dev/null 2>&1; then
            python="$candidate"
            break
        fi
    done
fi
[[ -n "$python" ]] || die "no Python >= 3.12 found: set PYTHON=/path/to/python3.12"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 12))' ||
    die "$python is older than 3.12: Django 6 needs 3.12+"

venv="${CONVEYOR_DJANGO6_VENV:-$ROOT/.venv-django6}"
if [[ ! -x "$venv/bin/python" ]]; then
    log "creating $venv with $python"
    "$python" -m venv "$venv"
fi
log "installing conveyor[postgres,django] with Django >= 6"
"$venv/bin/python" -m pip install -q -e ".[postgres,django]" "django>=6" \
    pytest pytest-asyncio pytest-timeout

services_up
export CONVEYOR_TEST_POSTGRES_URL CONVEYOR_REQUIRE_SERVICES=1
log "pytest tests/integration/test_django_tasks.py on $("$venv/bin/python" -c \
    'import django, sys; print(f"Django {django.get_version()}, Python {sys.version.split()[0]}")')"
# The SQLite backend binds numbered parameters (?1) to sequences in executemany,
# which Python 3.12+ deprecates: not an error of the code under test here.
"$venv/bin/python" -m pytest -q -p no:cacheprovider \
    -W "ignore:Binding:DeprecationWarning" tests/integration/test_django_tasks.py "$@"

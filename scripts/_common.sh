# shellcheck shell=bash
# Shared helpers for scripts/*.sh. Source it; do not run it.
#
#   ROOT      the repository root
#   VENV      the virtual environment (.venv, or $CONVEYOR_VENV)
#   PY        its python
#
# ensure_venv EXTRAS   create .venv if missing (python3 -m venv), upgrade pip and
#                      install -e ".[EXTRAS]" unless that exact install is already
#                      stamped in the venv (pyproject.toml unchanged since).

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CONVEYOR_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"

# Service tools (rabbitmqctl, nft, ip, pg_ctl's helpers) live in sbin, which a
# minimal PATH (env -i, cron, some CI runners) leaves out.
for _dir in /usr/local/sbin /usr/sbin /sbin; do
    case ":$PATH:" in
    *":$_dir:"*) ;;
    *) PATH="$PATH:$_dir" ;;
    esac
done
export PATH

# Quiet the machine's pip chatter (root warnings, version nags); errors still show.
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_ROOT_USER_ACTION=ignore
export PIP_NO_INPUT=1

if [[ -t 1 ]]; then
    _BOLD=$'\033[1m' _RED=$'\033[31m' _GREEN=$'\033[32m' _YELLOW=$'\033[33m' _RESET=$'\033[0m'
else
    _BOLD="" _RED="" _GREEN="" _YELLOW="" _RESET=""
fi

log() { printf '%s==> %s%s\n' "$_BOLD" "$*" "$_RESET"; }
warn() { printf '%swarning: %s%s\n' "$_YELLOW" "$*" "$_RESET" >&2; }
die() {
    printf '%serror: %s%s\n' "$_RED" "$*" "$_RESET" >&2
    exit 1
}
ok() { printf '%s%s%s\n' "$_GREEN" "$*" "$_RESET"; }

is_ci() {
    case "${CI:-}" in
    1 | true | TRUE | True | yes) return 0 ;;
    *) return 1 ;;
    esac
}

is_root() { [[ "$(id -u)" == "0" ]]; }

find_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3 python3.13 python3.12 python3.11; do
        [[ -n "$candidate" ]] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

# _pip ARGS: pip in the venv. Its output is shown, less the machine's harmless
# "Location ... is ignored" lines (a find-links folder that does not exist here);
# on failure everything is shown.
_pip() {
    local out rc=0
    out="$(mktemp)"
    "$PY" -m pip "$@" >"$out" 2>&1 || rc=$?
    if [[ $rc == 0 ]]; then
        grep -v -E "^WARNING: Location '.*' is ignored: it is neither a file nor a directory\.$" "$out" || true
    else
        cat "$out" >&2
    fi
    rm -f "$out"
    return "$rc"
}

ensure_venv() {
    local extras="$1" python spec stamp sum
    if [[ -x "$PY" ]] && ! "$PY" -c 'import sys' >/dev/null 2>&1; then
        warn "$VENV is broken (its python does not start): recreating it"
        rm -rf "$VENV"
    fi
    if [[ ! -x "$PY" ]]; then
        python="$(find_python)" ||
            die "conveyor needs Python >= 3.11 as python3 (or set PYTHON=/path/to/python3.11)"
        log "creating $VENV with $python ($("$python" --version 2>&1))"
        "$python" -m venv "$VENV"
    fi
    spec="."
    [[ -n "$extras" ]] && spec=".[$extras]"
    # The stamp: pyproject.toml's checksum, then every spec installed since it changed.
    stamp="$VENV/.conveyor-install-stamp"
    sum="$(cksum <"$ROOT/pyproject.toml")"
    if [[ -z "${CONVEYOR_REINSTALL:-}" && -f "$stamp" && "$(head -n1 "$stamp")" == "$sum" ]] &&
        grep -qxF -- "$spec" "$stamp"; then
        log "dependencies up to date in $VENV (CONVEYOR_REINSTALL=1 to reinstall)"
        return 0
    fi
    log "installing -e '$spec' into $VENV"
    _pip install -q --upgrade pip ||
        warn "could not upgrade pip; going on with $("$PY" -m pip --version)"
    (cd "$ROOT" && _pip install -q -e "$spec") || die "pip install -e '$spec' failed"
    if [[ ! -f "$stamp" || "$(head -n1 "$stamp")" != "$sum" ]]; then
        echo "$sum" >"$stamp"
    fi
    grep -qxF -- "$spec" "$stamp" || echo "$spec" >>"$stamp"
}

# run_fg COMMAND...: run COMMAND as a child and wait for it, so that a TERM sent to
# this script reaches it at once (forwarded) and the script's EXIT trap (which
# stops temporary servers) runs right after, not when the command ends by itself.
# INT is not forwarded: Ctrl-C already reaches the whole process group.
run_fg() {
    local child rc
    "$@" <&0 &
    child=$!
    trap 'kill -TERM "$child" 2>/dev/null || true' TERM
    trap ':' INT
    while :; do
        rc=0
        wait "$child" || rc=$?
        if [[ $rc -gt 128 ]] && kill -0 "$child" 2>/dev/null; then
            continue # a trapped signal interrupted wait; the child still runs
        fi
        break
    done
    trap 'exit 143' TERM
    trap 'exit 130' INT
    return "$rc"
}

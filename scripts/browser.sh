#!/usr/bin/env bash
# The browser the dashboard tests drive (tests/dashboard/test_browser.py):
# Debian's Chromium, given to Playwright by path (Playwright's own browser
# downloads are not used). Sourced by scripts/test.sh after _common.sh.
#
#   ensure_browser   find Chromium, or install it with apt-get when we are root;
#                    exports CONVEYOR_CHROMIUM. Without it: an error under CI, a
#                    warning elsewhere (the browser tests then fail with the same
#                    hint; run by plain pytest outside CI, they skip).

_find_chromium() {
    local candidate
    for candidate in "${CONVEYOR_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
        if [[ -n "$candidate" && -x "$candidate" ]]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

ensure_browser() {
    local found
    if found=$(_find_chromium); then
        export CONVEYOR_CHROMIUM="$found"
        return 0
    fi
    if is_root && command -v apt-get >/dev/null 2>&1; then
        log "Chromium is missing (dashboard browser tests): apt-get install -y chromium"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq || die "apt-get update failed"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null ||
            die "apt-get install -y chromium failed"
        found=$(_find_chromium) || die "chromium was installed but /usr/bin/chromium is missing"
        export CONVEYOR_CHROMIUM="$found"
        return 0
    fi
    local hint="the dashboard browser tests need Chromium. Install it, then run again:
    sudo apt-get update && sudo apt-get install -y chromium
(or export CONVEYOR_CHROMIUM=/path/to/chromium)"
    if is_ci; then
        die "$hint"
    fi
    warn "$hint"
}

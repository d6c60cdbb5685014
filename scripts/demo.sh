#!/usr/bin/env bash
# Install conveyor into .venv and run the embedded showcase (`conveyor demo`).
# Extra arguments go to `conveyor demo`.
set -euo pipefail

# shellcheck source=scripts/_common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/_common.sh"
# runs in the current directory: the demo leaves its SQLite file there
ensure_venv ""
exec "$VENV/bin/conveyor" demo "$@"

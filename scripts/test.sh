#!/usr/bin/env bash
# The tests: sets up everything on a fresh machine, then runs pytest (real MindSpore and torch jobs).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
bash "$ROOT/scripts/install_browser.sh"
bash "$ROOT/scripts/install_tmux.sh"
cd "$ROOT"
exec python -m pytest -q -p no:cacheprovider "$@"

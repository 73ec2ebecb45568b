#!/usr/bin/env bash
# Installs tmux, which the live view's test drives `msprof-agent top` in (from apt). Idempotent; scripts/test.sh calls it.
set -euo pipefail
if ! command -v tmux >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  # A failed install must not fail the whole test run: the test of top then skips, saying why.
  { $SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends tmux; } \
    || echo "install_tmux.sh: WARNING: could not install tmux; the test of msprof-agent top will be skipped" >&2
fi

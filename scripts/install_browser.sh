#!/usr/bin/env bash
# Installs what the viewer's browser tests drive: Debian's chromium (from apt, never a browser build
# downloaded by Playwright) and the playwright Python package into the venv. Idempotent; CI calls it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MSPROF_VENV:-$ROOT/.venv}"
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  # A failed browser install must not fail the whole test run: the browser tests then skip, loudly.
  { $SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core; } \
    || echo "install_browser.sh: WARNING: could not install chromium; the browser tests will be skipped" >&2
fi
if ! "$VENV/bin/python" -c "import playwright" 2>/dev/null; then
  # PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: the tests launch /usr/bin/chromium, nothing is fetched at run time.
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 "$VENV/bin/python" -m pip install -q playwright \
    || echo "install_browser.sh: WARNING: could not install playwright; the browser tests will be skipped" >&2
fi

#!/usr/bin/env bash
# Creates .venv (once) with the agent, MindSpore, the CPU build of torch 2.13.0 and the dev tools.
# Sourced by demo.sh and test.sh so a fresh machine needs nothing else. Sourced from a shell, it leaves
# that shell's options as they were: the setup runs in a subshell under set -euo pipefail (not indented,
# to keep its history); ROOT, VENV, PATH and MSPROF_HOOK_DIR are what reach the caller.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MSPROF_VENV:-$ROOT/.venv}"
(
set -euo pipefail
PY="${PYTHON:-python3}"
TORCH_VERSION=2.13.0
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
stamp="$VENV/.msprof-deps-$(cat "$ROOT/pyproject.toml" "$ROOT/scripts/setup_env.sh" | sha1sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # compat mode: a plain path entry in a .pth, not setuptools' import-hook finder, which costs
  # every interpreter in the venv about 10 ms at start-up (pathlib, urllib...).
  # torch pinned here, not in the extra (a range there, so it keeps a user's torch): the version the tests run
  # on; its CPU build (2.13.0+cpu) is preferred where a wheel source holds it, as CI's does, over PyPI's CUDA one.
  "$VENV/bin/python" -m pip install -q -e "$ROOT[dev,mindspore,torch,viewer]" "torch==$TORCH_VERSION" --config-settings editable_mode=compat
  touch "$stamp"
fi
# The hook's bytecode, written even where PYTHONDONTWRITEBYTECODE is set: compiling it at every
# start would cost each interpreter ~1.5 ms.
"$VENV/bin/python" -m compileall -q "$ROOT/sitecustomize_hook"
)
# Tested on its own line: in `( ... ) || ...` bash would ignore set -e inside the subshell.
if [ $? -ne 0 ]; then
  echo "scripts/setup_env.sh: setting up $VENV failed" >&2
  return 1 2>/dev/null || exit 1
fi
export PATH="$VENV/bin:$PATH"
export MSPROF_HOOK_DIR="$ROOT/sitecustomize_hook"

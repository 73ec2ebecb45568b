#!/usr/bin/env bash
# The fast set (pytest -m unit) as on a machine without MindSpore or PyTorch: a throwaway venv that sees
# this Python's packages but where importing either framework fails, in pytest and in every child it starts.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=python  # the project's (on PATH once scripts/setup_env.sh ran, or in an activated venv)
VENV="$(mktemp -d)/venv"
trap 'rm -rf "$(dirname "$VENV")"' EXIT
"$PY" -m venv --without-pip "$VENV"
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cat > "$SITE/no_frameworks.py" <<'PY'
"""Makes MindSpore and PyTorch look not installed."""
import sys


class NoFrameworks:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] in ("mindspore", "torch"):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by scripts/test_unit_without_frameworks.sh)", name=name)
        return None


sys.meta_path.insert(0, NoFrameworks)
PY
# The project first, then every package directory the calling Python sees.
"$PY" -c 'import sys; print("\n".join([sys.argv[1]] + [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]))' "$ROOT" > "$SITE/zz_packages.pth"
echo "import no_frameworks" > "$SITE/aa_no_frameworks.pth"
"$VENV/bin/python" -c 'import numpy, orjson, pytest
for name in ("torch", "mindspore"):
    try:
        __import__(name)
    except ImportError:
        continue
    raise SystemExit(f"{name} still imports")'
cd "$ROOT"
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider -m unit "$@"

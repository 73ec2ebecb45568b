"""The shell scripts a user sources or runs, in bash, on a stand-in virtual environment (nothing installed)."""
import hashlib
import os
import subprocess

import pytest

from conftest import ROOT

pytestmark = pytest.mark.unit
SETUP = os.path.join(ROOT, "scripts", "setup_env.sh")


def ready_venv(tmp_path, python_status=0):
    """A venv that setup_env.sh takes as set up: its stamp for this pyproject, a python that exits with ``python_status``."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f"#!/bin/sh\nexit {python_status}\n")
    python.chmod(0o755)
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        (venv / f".msprof-deps-{hashlib.sha1(handle.read()).hexdigest()[:12]}").touch()
    return str(venv)


def sourced(venv, before, after='echo "status $?"'):
    """bash: set BEFORE, source setup_env.sh, run AFTER; then print the options that matter and MSPROF_HOOK_DIR."""
    script = f'{before}\nsource {SETUP}\n{after}\nset -o | grep -E "^(errexit|nounset|pipefail) "\necho "hook=${{MSPROF_HOOK_DIR:-}}"\n'
    env = dict(os.environ, MSPROF_VENV=venv)
    env.pop("MSPROF_HOOK_DIR", None)
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)


def options(stdout):
    return {line.split()[0]: line.split()[1] for line in stdout.splitlines() if line.split()[:1] in (["errexit"], ["nounset"], ["pipefail"])}


@pytest.mark.parametrize("before, expected", [("set +euo pipefail", "off"), ("set -euo pipefail", "on")])
def test_sourcing_setup_env_keeps_the_callers_shell_options(tmp_path, before, expected):
    result = sourced(ready_venv(tmp_path), before)
    assert result.returncode == 0, result.stderr
    assert options(result.stdout) == {"errexit": expected, "nounset": expected, "pipefail": expected}
    assert "status 0" in result.stdout and f"hook={ROOT}/sitecustomize_hook" in result.stdout


def test_a_failed_setup_returns_to_the_caller_with_its_options(tmp_path):
    """Sourced without set -e, a failure is a status, not an exit of the user's shell; demo.sh's set -e stops on it."""
    venv = ready_venv(tmp_path, python_status=3)
    result = sourced(venv, "set +euo pipefail")
    assert result.returncode == 0 and "status 1" in result.stdout and "hook=\n" in result.stdout
    assert options(result.stdout) == {"errexit": "off", "nounset": "off", "pipefail": "off"}
    assert f"setting up {venv} failed" in result.stderr
    strict = sourced(venv, "set -euo pipefail", after='echo "went on"')
    assert strict.returncode != 0 and "went on" not in strict.stdout

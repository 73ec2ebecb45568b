"""Interpreter start-up cost of the agent's two doors, measured side by side in one run.

Prints the median wall time of ``python -c pass`` with no hook, with the hook on PYTHONPATH and the
variable unset, with ``"start": false``, and with ``"start": true``; and, for the installed package's
.pth, in a fresh venv with the wheel installed and the variable unset against the same kind of venv
without it. Runs are interleaved so that load on the shared machine hits every variant alike; then the
ratios (target for both doors with the variable unset: <= 1.01).
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK = os.path.join(ROOT, "sitecustomize_hook")


def make_venvs(work):
    """Two venvs of this interpreter, one with the wheel built from this checkout installed: their pythons."""
    wheels = os.path.join(work, "wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", wheels, ROOT], check=True)
    pythons = {}
    for name in ("bare", "installed"):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", os.path.join(work, name)], check=True)
        pythons[name] = os.path.join(work, name, "bin", "python")
    subprocess.run([sys.executable, "-m", "pip", "--python", pythons["installed"], "install", "-q", "--no-deps", "--no-index",
                    glob.glob(os.path.join(wheels, "*.whl"))[0]], check=True)
    return pythons


def variants(out_dir, pythons):
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MS_PROFILER_OPTIONS", "MSPROF_DYNAMIC_CFG")}
    hooked = dict(base, PYTHONPATH=HOOK)
    here = sys.executable
    return {
        "no hook": (here, base),
        "hook, variable unset": (here, hooked),
        "hook, start false": (here, dict(hooked, MS_PROFILER_OPTIONS=json.dumps({"start": False}))),
        "hook, start true": (here, dict(hooked, MS_PROFILER_OPTIONS=json.dumps({"start": True, "output_path": out_dir}))),
        "venv without package": (pythons["bare"], base),
        "venv, .pth, unset": (pythons["installed"], base),
        "venv, .pth, start false": (pythons["installed"], dict(base, MS_PROFILER_OPTIONS=json.dumps({"start": False}))),
    }


def time_once(python, env):
    began = time.perf_counter()
    subprocess.run([python, "-c", "pass"], env=env, check=True)
    return time.perf_counter() - began


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        cases = variants(os.path.join(work, "out"), make_venvs(work))
        samples = {name: [] for name in cases}
        for name, case in cases.items():  # warm the page cache once
            time_once(*case)
        for _ in range(args.rounds):
            for name, case in cases.items():
                samples[name].append(time_once(*case))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"python -c pass, {args.rounds} interleaved rounds, median wall time:")
    for name, value in medians.items():
        print(f"  {name:24s} {value * 1000:8.2f} ms")
    print(f"ratio hook+unset / no hook:                  {medians['hook, variable unset'] / medians['no hook']:.3f}  (target <= 1.01)")
    print(f"ratio hook+start false / no hook:            {medians['hook, start false'] / medians['no hook']:.3f}")
    print(f"ratio hook+start true / unset:               {medians['hook, start true'] / medians['hook, variable unset']:.3f}")
    print(f"ratio .pth+unset / venv without package:     {medians['venv, .pth, unset'] / medians['venv without package']:.3f}  (target <= 1.01)")
    print(f"ratio .pth+start false / venv without package: {medians['venv, .pth, start false'] / medians['venv without package']:.3f}")


if __name__ == "__main__":
    main()

"""Interpreter start-up cost of the hook, measured side by side in one run.

Prints the median wall time of ``python -c pass`` with no hook, with the hook on PYTHONPATH and the
variable unset, with ``"start": false``, and with ``"start": true``, runs interleaved so that load
on the shared machine hits every variant alike; then the ratios (target: unset / no hook <= 1.01).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK = os.path.join(ROOT, "sitecustomize_hook")


def variants(out_dir):
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MS_PROFILER_OPTIONS", "MSPROF_DYNAMIC_CFG")}
    hooked = dict(base, PYTHONPATH=HOOK)
    return {
        "no hook": base,
        "hook, variable unset": hooked,
        "hook, start false": dict(hooked, MS_PROFILER_OPTIONS=json.dumps({"start": False})),
        "hook, start true": dict(hooked, MS_PROFILER_OPTIONS=json.dumps({"start": True, "output_path": out_dir})),
    }


def time_once(env):
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    return time.perf_counter() - began


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out_dir:
        cases = variants(out_dir)
        samples = {name: [] for name in cases}
        for env in cases.values():  # warm the page cache once
            time_once(env)
        for _ in range(args.rounds):
            for name, env in cases.items():
                samples[name].append(time_once(env))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"python -c pass, {args.rounds} interleaved rounds, median wall time:")
    for name, value in medians.items():
        print(f"  {name:24s} {value * 1000:8.2f} ms")
    print(f"ratio hook+unset / no hook:        {medians['hook, variable unset'] / medians['no hook']:.3f}  (target <= 1.01)")
    print(f"ratio hook+start false / no hook:  {medians['hook, start false'] / medians['no hook']:.3f}")
    print(f"ratio hook+start true / unset:     {medians['hook, start true'] / medians['hook, variable unset']:.3f}")


if __name__ == "__main__":
    main()

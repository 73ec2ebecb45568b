"""Overhead of the MindSpore integration: LeNet-5 Model.train on CPU (examples/mindspore_lenet.py).

Four modes, each in fresh processes, interleaved round by round so machine noise hits them alike:
plain; MindSpore's own profiler through MS_PROFILER_OPTIONS (no hook); the agent (hook + the same
variable); the agent with op_time off (steps, waits and CPU samples only). Printed: median step
time (wall time between step ends, first ``--warmup`` steps of each run dropped: step 1 compiles)
and its ratio to plain, and the median whole-process wall time and what each mode adds to it
(import, collection, MindSpore's parse or our analysis at exit), and the agent's added time over
MindSpore's profiler's.

    .venv/bin/python bench/overhead_mindspore.py [--rounds 3] [--steps 40]
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
LENET = os.path.join(ROOT, "examples", "mindspore_lenet.py")
MODES = ("plain", "mindspore profiler", "agent", "agent op_time=false")


def run(mode, steps, out_dir):
    """One fresh process; returns (step durations in ms, process wall time in s)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MS_PROFILER_OPTIONS", "PYTHONPATH")}
    env.setdefault("GLOG_v", "3")
    if mode != "plain":
        options = {"start": True, "output_path": out_dir}
        if mode.startswith("agent"):
            env["PYTHONPATH"] = HOOK + os.pathsep + ROOT  # this checkout's agent, whatever the venv has installed
            options.update(op_time="op_time=false" not in mode)
        env["MS_PROFILER_OPTIONS"] = json.dumps(options)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, LENET, "--quiet", "--step-times", "--steps", str(steps)],
                          env=env, cwd=out_dir, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} failed:\n{proc.stderr[-2000:]}")
    line = next(text for text in proc.stdout.splitlines() if text.startswith("step_times_ms "))
    return json.loads(line.split(" ", 1)[1]), wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()

    steps = {m: [] for m in MODES}
    walls = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as scratch:
        for round_index in range(args.rounds):
            for mode in MODES:
                out = os.path.join(scratch, f"{mode.replace(' ', '_')}_{round_index}")
                os.makedirs(out)
                durations, wall = run(mode, args.steps, out)
                steps[mode] += durations[args.warmup:]
                walls[mode].append(wall)
    plain_step, plain_wall = statistics.median(steps["plain"]), statistics.median(walls["plain"])
    print(f"LeNet-5 Model.train, CPU, {args.rounds} interleaved rounds x {args.steps} steps "
          f"(first {args.warmup} steps of each run dropped)")
    for mode in MODES:
        step, wall = statistics.median(steps[mode]), statistics.median(walls[mode])
        print(f"  {mode:20s} median step {step:8.2f} ms  x{step / plain_step:.3f}   "
              f"process {wall:6.2f} s  {wall - plain_wall:+5.2f} s")
    added = {mode: statistics.median(walls[mode]) - plain_wall for mode in MODES}
    if added["mindspore profiler"] > 0:
        print(f"  the agent's added process time / MindSpore's profiler's: {added['agent'] / added['mindspore profiler']:.3f} (target <= 0.25)")


if __name__ == "__main__":
    main()

"""What profiling adds to a whole PyTorch job, and what the agent's exit costs inside it: examples/torch_cnn.py.

Four modes, each a fresh process, run in turn round by round so machine noise hits them alike: plain; the
agent with step timing only (``op_time: false``); the agent with its defaults (ops, shapes); torch.profiler
around the training loop (CPU ops, shapes, FLOPs, as the agent records them) and then
``key_averages().table()``, what a user of torch.profiler waits for. Printed: each mode's median wall time
and what it adds to plain's; the agent's added time over torch.profiler's (the ratio of the medians, and
pair by pair); and the agent's exit, timed inside the job (its session's finalize after the script's main:
the analysis, the files and the report), which a whole-process wall time on a shared machine hides in noise.

    .venv/bin/python bench/exit_whole.py [--rounds 3] [--steps 300]
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
SCRIPT = os.path.join(ROOT, "examples", "torch_cnn.py")
MODES = {"plain": None, "agent steps only": {"op_time": False}, "agent": {}, "torch.profiler": None}
CHILD = r"""
import json, runpy, sys, time
script, mode = sys.argv[1], sys.argv[2]
sys.argv = [script] + sys.argv[3:]
if mode == "torch.profiler":
    sys.path.insert(0, __import__("os").path.dirname(script))
    import torch
    import torch_cnn
    from torch.profiler import ProfilerActivity, profile
    args = torch_cnn.parse_args(sys.argv[1:])
    torch.set_num_threads(1)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
        torch_cnn.train(args, 0, 1)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)
    print(json.dumps({"table_lines": len(table.splitlines())}))
else:
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        pass
    if mode.startswith("agent"):
        began = time.perf_counter()
        import msprof_agent.session as session
        session._finalize_current("exit")  # what atexit runs next: timed here (it runs once)
        print(json.dumps({"exit_s": time.perf_counter() - began, "agent": session.__file__}))
"""


def run(mode, steps):
    """One fresh process: (its wall time in s, what it printed last as JSON, or {})."""
    env = {k: v for k, v in os.environ.items() if k not in ("MS_PROFILER_OPTIONS", "PYTHONPATH")}
    with tempfile.TemporaryDirectory() as out:
        if MODES[mode] is not None:
            env["PYTHONPATH"] = os.pathsep.join([HOOK, ROOT])
            env["MS_PROFILER_OPTIONS"] = json.dumps({"start": True, "output_path": out, **MODES[mode]})
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", CHILD, SCRIPT, mode, "--steps", str(steps)], env=env, cwd=out,
                              capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - began
        if done.returncode != 0:
            raise RuntimeError(f"{mode} failed: {done.stderr[-2000:]}")
        if MODES[mode] is not None and not os.path.exists(os.path.join(out, "profiler", "report_0.html")):
            raise RuntimeError(f"{mode} wrote no report: {done.stderr[-2000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    printed = json.loads(lines[-1]) if lines else {}
    if "agent" in printed and not printed["agent"].startswith(ROOT):
        raise RuntimeError(f"{mode} ran another checkout's agent: {printed['agent']}")
    return wall, printed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    walls = {mode: [] for mode in MODES}
    exits = {mode: [] for mode in MODES if mode.startswith("agent")}
    for _ in range(args.rounds):
        for mode in MODES:
            wall, printed = run(mode, args.steps)
            walls[mode].append(wall)
            if mode in exits:
                exits[mode].append(printed["exit_s"])
    plain = statistics.median(walls["plain"])
    print(f"examples/torch_cnn.py, {args.steps} steps: medians of {args.rounds} rounds, fresh processes")
    for mode, values in walls.items():
        exit_text = f"   its exit in the job {statistics.median(exits[mode]):6.2f} s" if mode in exits else ""
        print(f"  {mode:18s} wall {statistics.median(values):7.2f} s   added {statistics.median(values) - plain:+7.2f} s{exit_text}")
    added = {mode: statistics.median(walls[mode]) - plain for mode in MODES}
    pairs = [(a - p) / (t - p) for a, t, p in zip(walls["agent"], walls["torch.profiler"], walls["plain"]) if t > p]
    print(f"  agent's added time / torch.profiler's: {added['agent'] / added['torch.profiler']:.3f} (target <= 0.25); "
          f"pair by pair {[round(r, 3) for r in pairs]}")
    print(f"  steps-only exit in the job: {[round(e, 3) for e in exits['agent steps only']]} s (target <= 0.2)")


if __name__ == "__main__":
    main()

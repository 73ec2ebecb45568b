"""What profiling costs a GPU training: plain, a bare torch.profiler and the agent in each mode, on the job's own clock.

Each run is a fresh process of ``bench/gpu_job.py`` (a GPT-style bf16 training of 118.6 M parameters, and a
launch-bound small one); the job times its own steps with CUDA events. Printed, per job and mode: the median and
the mean of the steady steps (11 on) as ratios against plain and against the bare torch.profiler over the same
steps, the whole process's wall time over plain's, its peak RSS, and any warning line on its stderr that the plain
run did not print. Needs CUDA: where there is none it says so and exits 0 (``--device cpu`` dry-runs the whole
bench on the CPU with tiny step counts, to check the bench itself).

    python bench/gpu.py --out /tmp/gpu-bench            # on a GPU machine (about 5 minutes on an H200)
    python bench/gpu.py --device cpu --quick --out /tmp/b  # the bench's own check, anywhere
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JOB = os.path.join(HERE, "gpu_job.py")

# (case, model, steps, extra job args, modes)
CASES = (
    ("gpt", "gpt", 60, [], ("plain", "native", "native+export", "all_ops", "all_ops_cpu_1s", "default", "steps_only")),
    ("tiny", "tiny", 150, [], ("plain", "native", "all_ops", "default")),
    ("gpt_long", "gpt", 600, [], ("plain", "default")),
    ("gpt_data", "gpt", 30, ["--data-sleep-ms", "40"], ("plain", "default")),
    ("gpt_compile", "gpt", 30, ["--compile"], ("plain", "default")),
)
QUICK_STEPS = {"gpt": 14, "tiny": 14, "gpt_long": 14, "gpt_data": 12, "gpt_compile": 12}
# all_ops_cpu_1s: the CPU sampler at the interval given, 1 s, instead of adapting from 10 ms as a window starts
# (bench/sampler_gil.py: each sample costs a thread launching small ops more than its own CPU)
AGENT_OPTIONS = {"all_ops": {"start_step": 1}, "all_ops_cpu_1s": {"start_step": 1, "cpu_sampling_interval": 1000}, "default": {},
                 "steps_only": {"op_time": False}}


def run(case: str, model: str, steps: int, extra: list[str], mode: str, out: str, device: str) -> dict[str, object]:
    """One process of the job in MODE; its own figures plus wall time, peak RSS and stderr."""
    result = os.path.join(out, f"{case}_{mode}.json".replace("+", "_"))
    command = [sys.executable, JOB, "--model", model, "--steps", str(steps), "--result", result, "--device", device, *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("MS_PROFILER_OPTIONS", None)
    if mode.startswith("native"):
        command += ["--native", os.path.join(out, f"{case}_trace.json") if mode == "native+export" else "none"]
    if mode in AGENT_OPTIONS:
        options = {"start": True, "output_path": os.path.join(out, f"{case}_{mode}"), **AGENT_OPTIONS[mode]}
        env["MS_PROFILER_OPTIONS"] = json.dumps(options)
        env["PYTHONPATH"] = os.pathsep.join([ROOT, os.path.join(ROOT, "sitecustomize_hook"), env.get("PYTHONPATH", "")])
    logs = os.path.join(out, f"{case}_{mode}".replace("+", "_"))
    began = time.perf_counter()
    with open(logs + ".out", "wb") as stdout, open(logs + ".err", "wb") as stderr:
        proc = subprocess.Popen(command, env=env, stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own rusage: its peak RSS
    wall = time.perf_counter() - began
    with open(logs + ".out", errors="replace") as o, open(logs + ".err", errors="replace") as e:
        figures: dict[str, object] = {"case": case, "mode": mode, "rc": os.waitstatus_to_exitcode(status), "wall_s": round(wall, 3),
                                      "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "stderr": e.read(), "stdout": o.read()}
    try:
        with open(result) as handle:
            job = json.load(handle)
    except (OSError, ValueError):
        return figures
    steady = job["gpu_step_ms"][10:] or job["gpu_step_ms"]
    ordered = sorted(steady)
    figures.update(median_ms=round(ordered[len(ordered) // 2], 3), mean_ms=round(sum(steady) / len(steady), 3),
                   loss=job["loss"], peak_allocated=job["max_memory_allocated"], loop_s=job["loop_s"])
    return figures


def warnings_of(stderr: str) -> set[str]:
    return {line.strip() for line in stderr.splitlines() if "Warning" in line or "warn" in line.lower()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="a few steps each: to check the bench, not to measure")
    parser.add_argument("--cases", default=",".join(c[0] for c in CASES))
    args = parser.parse_args()
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("bench/gpu.py: no CUDA device here; nothing measured (run it where a GPU is)")
            return 0
    os.makedirs(args.out, exist_ok=True)
    wanted = set(args.cases.split(","))
    rows = []
    for case, model, steps, extra, modes in CASES:
        if case not in wanted:
            continue
        steps = QUICK_STEPS[case] if args.quick else steps
        by_mode = {}
        for mode in modes:
            figures = run(case, model, steps, extra, mode, args.out, args.device)
            by_mode[mode] = figures
            print(f"{case:12s} {mode:14s} rc={figures['rc']} median {figures.get('median_ms')} ms, mean {figures.get('mean_ms')} ms, "
                  f"wall {figures['wall_s']} s, peak RSS {figures.get('peak_rss_mb')} MB", flush=True)
        plain, native = by_mode.get("plain", {}), by_mode.get("native", {})
        for figures in by_mode.values():
            row = {k: v for k, v in figures.items() if k not in ("stderr", "stdout")}
            for base_name, base in (("plain", plain), ("native", native)):
                for key in ("median_ms", "mean_ms"):
                    if base.get(key) and figures.get(key):
                        row[f"{key}_x_{base_name}"] = round(figures[key] / base[key], 3)
            if plain.get("wall_s"):
                row["extra_wall_s"] = round(figures["wall_s"] - plain["wall_s"], 2)
            row["new_warnings"] = sorted(warnings_of(figures["stderr"]) - warnings_of(plain.get("stderr", "")))
            row["agent_lines"] = [line for line in figures["stderr"].splitlines() if line.startswith("msprof-agent:")][:14]
            rows.append(row)
    with open(os.path.join(args.out, "bench_gpu.json"), "w") as handle:
        json.dump(rows, handle, indent=1)
    print(f"\n{'case':12s} {'mode':14s} {'median ms':>9s} {'x plain':>8s} {'x native':>8s} {'mean ms':>8s} {'x plain':>8s} {'x native':>8s} "
          f"{'wall s':>7s} {'+wall s':>7s} {'RSS MB':>7s}  new warnings")
    for r in rows:
        print(f"{r['case']:12s} {r['mode']:14s} {r.get('median_ms', '-')!s:>9s} {r.get('median_ms_x_plain', '-')!s:>8s} "
              f"{r.get('median_ms_x_native', '-')!s:>8s} {r.get('mean_ms', '-')!s:>8s} {r.get('mean_ms_x_plain', '-')!s:>8s} "
              f"{r.get('mean_ms_x_native', '-')!s:>8s} {r['wall_s']!s:>7s} {r.get('extra_wall_s', '-')!s:>7s} {r.get('peak_rss_mb', '-')!s:>7s}  "
              f"{len(r['new_warnings'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

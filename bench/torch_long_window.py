"""A long torch window near the profiler's floor: 1 500 steps of the bundled CNN (examples/torch_cnn.py), all ops.

Each run is a fresh process training ``SmallCNN`` on its synthetic batches; its training wall is the
loop's (the first fetch to the last optimizer step), and for the bare profiler the ``stop()`` after it.
The process's CPU time over the same span is printed beside it: on a shared machine it moves far less
with the other jobs' load than the wall does.
Modes, in a shuffled order each round (separate processes differ by ±20 % here, so the ratios are
taken within a round and their median reported):

- plain: no profiler;
- floor: one bare ``torch.profiler`` session over the loop, without shapes (start, loop, stop);
- agent: the agent recording the window (its default: shapes sampled, ``device.SHAPES_EVERY``);
- agent all shapes: the same with shapes and FLOPs in every profiler session (``MSPROF_TORCH_SHAPES_EVERY=1``).

The two agent runs of a round are then compared: FLOPs per step, MFU with the run's own step time
taken out (MFU x steady time = FLOPs / peak) and as recorded, and the operators-by-shape page's
(op, shape) counts; the summary's ``shapes`` field says which sessions had shapes and how the rest were filled.

    .venv/bin/python bench/torch_long_window.py [--steps 1500] [--rounds 3]
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK = os.path.join(ROOT, "sitecustomize_hook")
MODES = ("plain", "floor", "agent", "agent all shapes")
SHAPES_EVERY = "MSPROF_TORCH_SHAPES_EVERY"


def worker(args):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import torch
    from torch.utils.data import DataLoader
    from torch_cnn import SmallCNN, SyntheticBatches

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = SmallCNN()
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = DataLoader(SyntheticBatches(args.steps, 0), batch_size=None)
    prof = None
    if args.mode == "floor":
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU])
    began, cpu = time.perf_counter(), time.process_time()
    if prof is not None:
        prof.start()
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    stopping = time.perf_counter()
    if prof is not None:
        prof.stop()
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    with open(args.result, "w") as handle:
        json.dump({"wall_s": wall, "stop_s": wall - (stopping - began), "cpu_s": cpu}, handle)


def run(mode, steps, out_dir):
    env = {k: v for k, v in os.environ.items() if k not in ("MS_PROFILER_OPTIONS", "PYTHONPATH", SHAPES_EVERY)}
    if mode.startswith("agent"):
        env["PYTHONPATH"] = HOOK
        env["MS_PROFILER_OPTIONS"] = json.dumps({"start": True, "output_path": out_dir, "stop_step": steps})
        if mode == "agent all shapes":
            env[SHAPES_EVERY] = "1"
    result = os.path.join(out_dir, "result.json")
    subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", "--mode", mode, "--steps", str(steps), "--result", result],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    with open(result) as handle:
        values = json.load(handle)
    if mode == "floor":
        print(f"  floor: stop() {values['stop_s']:.2f} s of {values['wall_s']:.2f} s")
    return values["wall_s"], values["cpu_s"]


def analysed(out_dir):
    """(FLOPs per step, MFU, MFU x steady seconds, {(op, shape): count}, the summary's shapes field) of an agent run."""
    profiler = os.path.join(out_dir, "profiler")
    with open(os.path.join(profiler, "summary_0.json")) as handle:
        summary = json.load(handle)
    flops = summary.get("flops") or {}
    mfu = (flops.get("mfu") or {}).get("ratio") or 0.0
    warm, per_step = {w["step"] for w in summary["warmup_steps"]}, summary["per_step_ms"]
    steady = [t for n, t in zip(per_step["step"], per_step["total"]) if n not in warm]
    steady_s = sum(steady) / len(steady) / 1e3  # the mean steady step: MFU x it = FLOPs per step / peak
    handed = next((n for n in summary["notes"] if n.startswith("torch.profiler hand-over")), "no hand-over")
    counts = {}
    with open(os.path.join(profiler, "cpu_op_shape_info_0.csv")) as handle:
        for row in csv.DictReader(handle):
            counts[(row["op_name"], row["input_shape"])] = int(row["op_occurrences"])
    return flops.get("mflops_per_step", 0.0), mfu, mfu * steady_s, counts, summary.get("shapes"), handed.removesuffix(" (left out of the findings)")


def shape_page_difference(sampled, every):
    """The largest difference of an (op, shape) row's count, as a share of that op's calls in the all-shapes run."""
    by_op = {}
    for (op, _), count in every.items():
        by_op[op] = by_op.get(op, 0) + count
    worst = 0.0
    for key in set(sampled) | set(every):
        worst = max(worst, abs(sampled.get(key, 0) - every.get(key, 0)) / max(by_op.get(key[0], 1), 1))
    return worst


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    import random

    modes = args.modes.split(",")
    walls = {mode: [] for mode in modes}
    ratios, cpu_ratios = {}, {}
    print(f"{args.steps} steps of examples/torch_cnn.py's SmallCNN per run; {args.rounds} rounds; load average {os.getloadavg()[0]:.2f} "
          f"on {os.cpu_count()} CPUs at the start")
    for r in range(args.rounds):
        order = list(modes)
        random.shuffle(order)
        this, cpu = {}, {}
        with tempfile.TemporaryDirectory() as tmp:
            for mode in order:
                out = os.path.join(tmp, mode.replace(" ", "_"))
                os.makedirs(out)
                this[mode], cpu[mode] = run(mode, args.steps, out)
                walls[mode].append(this[mode])
            line = "  ".join(f"{m} {this[m]:6.2f} s (CPU {cpu[m]:6.2f} s)" for m in modes)
            for a, b in (("agent", "floor"), ("agent", "plain"), ("floor", "plain"), ("agent all shapes", "floor")):
                if a in this and b in this:
                    ratios.setdefault((a, b), []).append(this[a] / this[b])
                    cpu_ratios.setdefault((a, b), []).append(cpu[a] / cpu[b])
            print(f"round {r + 1} ({', '.join(order)}; load {os.getloadavg()[0]:.2f}): {line}")
            if "agent" in this and "agent all shapes" in this:
                s, e = analysed(os.path.join(tmp, "agent")), analysed(os.path.join(tmp, "agent_all_shapes"))
                print(f"  FLOPs/step {s[0]:.4f} M vs {e[0]:.4f} M (x{s[0] / e[0]:.4f}); MFU x steady time x{s[2] / e[2]:.4f} "
                      f"(MFU {s[1]:.4%} vs {e[1]:.4%}); shape page: largest count difference {shape_page_difference(s[3], e[3]):.2%} "
                      f"of an op's calls ({len(s[3])} vs {len(e[3])} rows)")
                print(f"  agent: {s[5]}; agent all shapes: {e[5]}")
                print(f"  shapes: {json.dumps({k: v for k, v in s[4].items() if k != 'rule'})}")
    print("medians:  " + "  ".join(f"{m} {statistics.median(w):.2f} s" for m, w in walls.items()))
    for (a, b), values in ratios.items():
        print(f"  {a} / {b}: median x{statistics.median(values):.3f} (rounds: {', '.join(f'{v:.3f}' for v in values)}); "
              f"process CPU time x{statistics.median(cpu_ratios[(a, b)]):.3f} ({', '.join(f'{v:.3f}' for v in cpu_ratios[(a, b)])})")


if __name__ == "__main__":
    main()

"""Cost of always-on step timing (no op collection), side by side with no agent.

Fresh processes, interleaved rounds: the same PyTorch loop (a small MLP with a fixed amount of
compute per step) runs without the hook and with the agent on but its op window never reached
(``start_step`` beyond the run), so only the step boundaries, data waits and forward/backward
markers are recorded. Prints median step times, their ratio (target <= 1.005) and the absolute
cost per step, which is what decides the ratio for other step lengths.
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
WARMUP = 10


def worker(steps, width):
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    data = torch.utils.data.TensorDataset(torch.randn(steps * 64, width), torch.randn(steps * 64, width))
    ends = [time.perf_counter()]
    for x, y in torch.utils.data.DataLoader(data, batch_size=64):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        ends.append(time.perf_counter())
    durations = [b - a for a, b in zip(ends, ends[1:])][WARMUP:]
    print(json.dumps(durations))


def run(mode, steps, width, out_dir):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MS_PROFILER_OPTIONS")}
    if mode == "agent":
        env["PYTHONPATH"] = HOOK
        env["MS_PROFILER_OPTIONS"] = json.dumps({"start": True, "output_path": out_dir, "start_step": 10 ** 9})
    result = subprocess.run([sys.executable, __file__, "--worker", "--steps", str(steps), "--width", str(width)],
                            env=env, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--width", type=int, default=512, help="MLP width: 512 gives steps of a few ms on one core")
    parser.add_argument("--worker", action="store_true")
    args = parser.parse_args()
    if args.worker:
        return worker(args.steps, args.width)
    samples = {"no agent": [], "agent, step timing only": []}
    with tempfile.TemporaryDirectory() as out_dir:
        for _ in range(args.rounds):
            samples["no agent"] += run("plain", args.steps, args.width, out_dir)
            samples["agent, step timing only"] += run("agent", args.steps, args.width, out_dir)
    medians = {k: statistics.median(v) for k, v in samples.items()}
    print(f"{args.rounds} interleaved rounds x {args.steps} steps (first {WARMUP} of each run skipped), median step time:")
    for name, value in medians.items():
        print(f"  {name:26s} {value * 1000:8.3f} ms")
    extra = medians["agent, step timing only"] - medians["no agent"]
    print(f"ratio: {medians['agent, step timing only'] / medians['no agent']:.4f} (target <= 1.005); "
          f"cost per step: {extra * 1e6:+.1f} us (on a 100 ms step that is {extra / 0.1:+.3%})")


if __name__ == "__main__":
    main()

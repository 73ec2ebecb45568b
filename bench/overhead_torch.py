"""Overhead of the PyTorch integration, measured on the example CNN in fresh processes.

Part 1 (interleaved rounds, so machine noise hits every mode alike): median step time of the
plain script, under torch.profiler with the agent's activities, under the agent with op_time on,
and with op_time off; ratios to plain.
Part 2 (a long window, fully profiled): what the agent costs at exit (device stop + event read +
raw write + analysis) and its peak RSS, against torch.profiler's own ``key_averages()`` on the same
steps (capped by a timeout), plus the agent's stop()+event read alone, timed in-process.

    .venv/bin/python bench/overhead_torch.py [--rounds 3] [--steps 60] [--long-steps 300]
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
WARMUP = 5


# -- the worker: one training run, timing its own steps --------------------------------------------
def worker(args):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import torch
    import torch_cnn

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, loss_fn = torch_cnn.SmallCNN(), torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(torch_cnn.SyntheticBatches(args.steps, 0), batch_size=None)
    result = {}

    def train():
        ends = [time.perf_counter()]
        for x, y in loader:
            loss_fn(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            ends.append(time.perf_counter())
        return [b - a for a, b in zip(ends, ends[1:])]

    if args.mode == "torch.profiler":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
            result["step_s"] = train()
        if args.key_averages:
            start = time.perf_counter()
            table = prof.key_averages()
            result["key_averages_s"] = time.perf_counter() - start
            result["op_types"] = len(table)
    elif args.mode == "device-only":
        result.update(device_only(train))
    else:
        result["step_s"] = train()
    result["train_end"] = time.time()
    with open(args.result, "w") as handle:
        json.dump(result, handle)


def device_only(train):
    """The agent's device session alone: start, train, then stop() with its event read and batching."""
    from msprof_agent.collectors.steps import StepRecorder
    from msprof_agent.frameworks.torch import TorchDeviceSession
    from msprof_agent.options import Options

    class Sink:
        ops = 0

        def record(self, record):
            if record.get("k") == "ops":
                Sink.ops += len(record["start"])

    device = TorchDeviceSession(Options(start=True), steps=StepRecorder(lambda *a: None, lambda s: None))
    device.start()
    step_s = train()
    start = time.perf_counter()
    device.stop(Sink())
    return {"step_s": step_s, "stop_and_read_s": time.perf_counter() - start, "ops": Sink.ops}


# -- the driver --------------------------------------------------------------------------------------
def run(mode, steps, out_dir, agent_options=None, key_averages=False, timeout=900):
    """One fresh process; returns its result dict plus exit tail (s after training) and peak RSS (MiB)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MS_PROFILER_OPTIONS", "PYTHONPATH")}
    if agent_options is not None:
        env["PYTHONPATH"] = HOOK
        env["MS_PROFILER_OPTIONS"] = json.dumps(dict(agent_options, start=True, output_path=out_dir))
    result_path = os.path.join(out_dir, f"result-{mode}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--mode", mode, "--steps", str(steps), "--result", result_path]
    if key_averages:
        cmd.append("--key-averages")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.time() > deadline:
            proc.kill()
            os.wait4(proc.pid, 0)
            return {"timeout_s": timeout}
        time.sleep(0.02)
    ended = time.time()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{mode} failed: {proc.stderr.read().decode()[-2000:]}")
    with open(result_path) as handle:
        result = json.load(handle)
    result["exit_tail_s"] = ended - result["train_end"]
    result["peak_rss_mib"] = usage.ru_maxrss / 1024
    return result


MODES = {
    "plain": ("plain", None),
    "torch.profiler": ("torch.profiler", None),
    "agent": ("agent", {"op_time": True}),
    "agent op_time=false": ("agent", {"op_time": False}),
}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--long-steps", type=int, default=300)
    p.add_argument("--key-averages-timeout", type=int, default=600)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--key-averages", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)

    times = {name: [] for name in MODES}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.rounds):
            for name, (mode, agent_options) in MODES.items():
                out = os.path.join(scratch, name.replace(" ", "_"))
                os.makedirs(out, exist_ok=True)
                times[name] += run(mode, args.steps, out, agent_options)["step_s"][WARMUP:]
        plain = statistics.median(times["plain"])
        print(f"Part 1: {args.rounds} interleaved rounds x {args.steps} steps (first {WARMUP} of each run dropped)")
        for name, values in times.items():
            median = statistics.median(values)
            print(f"  {name:22s} median step {median * 1e3:7.3f} ms   x{median / plain:.3f}")

        n = args.long_steps
        print(f"Part 2: {n} steps, whole run profiled")
        out = os.path.join(scratch, "long")
        os.makedirs(out)
        base = run("plain", n, out)
        agent = run("agent", n, out, {"op_time": True})
        ops = sum(len(r.get("start", ())) for r in _records(out) if r.get("k") == "ops")
        print(f"  plain                   exit tail {base['exit_tail_s']:6.2f} s   peak RSS {base['peak_rss_mib']:7.1f} MiB")
        print(f"  agent                   exit tail {agent['exit_tail_s']:6.2f} s   peak RSS {agent['peak_rss_mib']:7.1f} MiB   ({ops} ops recorded)")
        alone = run("device-only", n, out)
        print(f"  agent stop()+read only  {alone['stop_and_read_s']:6.2f} s   ({alone['ops']} ops)")
        ref = run("torch.profiler", n, out, key_averages=True, timeout=args.key_averages_timeout)
        if "timeout_s" in ref:
            print(f"  key_averages()          > {ref['timeout_s']} s (killed)")
        else:
            print(f"  key_averages()          {ref['key_averages_s']:6.2f} s   peak RSS {ref['peak_rss_mib']:7.1f} MiB   ({ref['op_types']} op types)")


def _records(out_dir):
    from msprof_agent.store import read_records

    return read_records(os.path.join(out_dir, "profiler"), 0)


if __name__ == "__main__":
    main()

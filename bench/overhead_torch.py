"""Overhead of the PyTorch integration on a ResNet-style CNN of the issue's size (~3,700 events/step).

Part 1, step time, in one process (torch_blocks.interleave): blocks of 10 steps run in turn plain,
under torch.profiler with the agent's settings (CPU ops, shapes, FLOPs), under the agent with
op_time (its torch.profiler sessions plus its step hooks), with op_time and with_stack (plus its 5 ms
Python stack sampler) and with op_time false (step hooks only).
Medians and ratios with bootstrap 95 % intervals. Stopping a profiler session (torch's stop() and
the agent's hand-over of its events) happens between steps and is reported as wall time per step.
Part 2, exit, in fresh processes, 300 steps profiled whole (1.1 M events): the agent's exit time
(its last profiler session's stop, event read, raw write, analysis) and peak RSS, beside
torch.profiler's own stop() and ``key_averages()`` and its peak RSS.

    .venv/bin/python bench/overhead_torch.py [--rounds 6] [--long-steps 300]
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
sys.path.insert(0, ROOT)


def profiler():
    from torch.profiler import ProfilerActivity, profile

    return profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True)


# -- part 1 -------------------------------------------------------------------------------------------
def step_time(rounds):
    import torch

    from bench.torch_blocks import interleave, median_ratio, resnet_training, train_steps
    from msprof_agent import options, session
    from msprof_agent.frameworks.torch import patch as integration

    torch.set_num_threads(1)
    model, optimizer, loader = resnet_training(11)
    with tempfile.TemporaryDirectory() as out_dir:
        settings = {"start": True, "output_path": out_dir, "start_step": 10 ** 9}
        current = session.start(options.from_mapping(settings), origin="bench")
        plain_options, stack_options = current.run.options, options.from_mapping(dict(settings, with_stack=True))
        native = {}

        def agent_on(run_options=plain_options):
            current.run.options = run_options
            integration.install(current)
            current.start_recording(explicit=True)

        def agent_off():
            current.stop_recording()
            integration.uninstall()
            current.run.options = plain_options

        modes = {
            "plain": (lambda: None, lambda: None),
            "torch.profiler": (lambda: native.setdefault("prof", profiler()).start(), lambda: native.pop("prof").stop()),
            "agent": (agent_on, agent_off),
            "agent with_stack": (lambda: agent_on(stack_options), agent_off),
            "agent op_time=false": (lambda: integration.install(current), integration.uninstall),
        }
        steps, walls = interleave(modes, lambda: train_steps(model, optimizer, loader), rounds)
        current.finalize("bench")
    print(f"Part 1: {rounds} rounds x 10 steps per mode, in one process")
    plain = statistics.median(steps["plain"])
    for name, values in steps.items():
        ratio, low, high = median_ratio(steps["plain"], values)
        wall = statistics.median(walls[name]) / 10
        print(f"  {name:20s} median step {statistics.median(values) * 1e3:7.2f} ms  x{ratio:.4f} (95 % {low:.4f} .. {high:.4f})"
              f"   wall per step with stops {wall * 1e3:7.2f} ms")
    ratio, low, high = median_ratio(steps["torch.profiler"], steps["agent"])
    print(f"  agent over torch.profiler: x{ratio:.4f} (95 % {low:.4f} .. {high:.4f}; target <= 1.01)")
    ratio, low, high = median_ratio(steps["agent"], steps["agent with_stack"])
    print(f"  with_stack over agent: x{ratio:.4f} (95 % {low:.4f} .. {high:.4f}; target <= 1.1)")
    ratio, low, high = median_ratio(steps["plain"], steps["agent op_time=false"])
    print(f"  agent op_time=false over plain: x{ratio:.4f} (95 % {low:.4f} .. {high:.4f}; target <= 1.01; "
          f"bench/step_timing.py measures its cost per step precisely); plain step {plain * 1e3:.1f} ms")


# -- part 2 -------------------------------------------------------------------------------------------
def worker(args):
    import torch

    from bench.torch_blocks import resnet_training, train_steps

    torch.set_num_threads(1)
    model, optimizer, loader = resnet_training(args.steps)
    result = {"train_start": time.time()}
    if args.mode == "torch.profiler":
        prof = profiler()
        prof.start()
        train_steps(model, optimizer, loader)
        result["train_end"] = time.time()
        began = time.perf_counter()
        prof.stop()
        result["stop_s"] = time.perf_counter() - began
        began = time.perf_counter()
        result["op_types"] = len(prof.key_averages())
        result["key_averages_s"] = time.perf_counter() - began
    else:
        train_steps(model, optimizer, loader)
        result["train_end"] = time.time()
    with open(args.result, "w") as handle:
        json.dump(result, handle)


def run(mode, steps, out_dir, timeout):
    """One fresh process; its result dict plus the seconds from its training's end to its exit, and peak RSS."""
    env = {k: v for k, v in os.environ.items() if k not in ("MS_PROFILER_OPTIONS", "PYTHONPATH")}
    if mode == "agent":
        env["PYTHONPATH"] = HOOK + os.pathsep + ROOT  # this checkout's agent, whatever the venv has installed
        env["MS_PROFILER_OPTIONS"] = json.dumps({"start": True, "output_path": out_dir})
    result_path = os.path.join(out_dir, f"result-{mode}.json")
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--mode", mode, "--steps", str(steps),
                             "--result", result_path], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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
    result["exit_s"] = ended - result["train_end"]
    result["wall_s"] = ended - result["train_start"]
    result["peak_rss_mib"] = usage.ru_maxrss / 1024
    return result


def exit_cost(steps, timeout):
    from msprof_agent.analysis.rundata import load_rank

    print(f"Part 2: {steps} steps profiled whole, fresh processes")
    with tempfile.TemporaryDirectory() as out:
        agent = run("agent", steps, out, timeout)
        ops = load_rank(os.path.join(out, "profiler"), 0).op_count
        print(f"  agent            exit {agent['exit_s']:6.2f} s   peak RSS {agent['peak_rss_mib']:7.0f} MiB   "
              f"wall {agent['wall_s']:6.1f} s   ({ops:,} ops recorded)")
        ref = run("torch.profiler", steps, out, timeout)
        if "timeout_s" in ref:
            print(f"  torch.profiler   stop() + key_averages() > {ref['timeout_s']} s (killed)")
            return
        print(f"  torch.profiler   stop() {ref['stop_s']:6.2f} s + key_averages() {ref['key_averages_s']:6.2f} s   "
              f"peak RSS {ref['peak_rss_mib']:7.0f} MiB   wall {ref['wall_s']:6.1f} s")
        print(f"  agent exit / key_averages(): {agent['exit_s'] / ref['key_averages_s']:.3f} (target <= 0.1); "
              f"agent exit / (stop() + key_averages()): {agent['exit_s'] / (ref['stop_s'] + ref['key_averages_s']):.3f}; "
              f"agent peak RSS {agent['peak_rss_mib'] / 1024:.2f} GiB (target <= 1.5)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--long-steps", type=int, default=300, help="0: part 1 only")
    p.add_argument("--timeout", type=int, default=1200)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    step_time(args.rounds)
    if args.long_steps:
        exit_cost(args.long_steps, args.timeout)


if __name__ == "__main__":
    main()

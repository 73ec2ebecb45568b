"""Cost per collective call of the agent's torch.distributed wrapper, and of the entry it writes first.

Before a collective can block, the wrapper writes its entry (group, that group's sequence number, step)
to the raw store with one write (``EventWriter.write_now``), so a job killed while hung says who
waited where. Measured in one process on a 1-rank gloo group over loopback (a 4-float all_reduce,
one intra-op thread), in blocks run in turn: no agent; the agent's wrapper with its entry skipped;
the whole wrapper. Medians per call, bootstrap 95 % intervals. Then DDP's gradient all-reduce, which
DDP runs from C++ past those wrappers: a forward and backward of a DDP'd 2-layer MLP (one bucket) under
the agent, its DDP built before the agent was installed (no hook: the reducer's own all-reduce) or after
(the agent's communication hook: the entry, then torch's allreduce_hook), or before it with torch's
allreduce_hook registered by hand (what any Python comm hook costs, the agent's entry left out), or
after it with the entry skipped (the hook's own frames), a DDP built in each block.

    .venv/bin/python bench/collective_entry.py [--rounds 30] [--calls 200]
"""
import argparse
import os
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook  # noqa: E402

from bench.torch_blocks import interleave, median_difference  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    from msprof_agent import options, session
    from msprof_agent.frameworks.torch import patch as integration

    torch.set_num_threads(1)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    tensor = torch.ones(4)

    def calls():
        times = []
        for _ in range(args.calls):
            began = time.perf_counter()
            dist.all_reduce(tensor)
            times.append(time.perf_counter() - began)
        return times

    def without_entry():
        integration.install(current)
        integration._state._entered = lambda name, a, k: (None, None)

    with tempfile.TemporaryDirectory() as out_dir:
        current = session.start(options.from_mapping({"start": True, "output_path": out_dir, "start_step": 10 ** 9}), origin="bench")
        modes = {"no agent": (lambda: None, lambda: None), "wrapper, no entry": (without_entry, integration.uninstall),
                 "wrapper": (lambda: integration.install(current), integration.uninstall)}
        times, _ = interleave(modes, calls, args.rounds)
        for name in ("wrapper, no entry", "wrapper"):
            cost, low, high = median_difference(times["no agent"], times[name])
            print(f"{name}: {cost * 1e6:+.2f} us per call (95 % {low * 1e6:+.2f} .. {high * 1e6:+.2f})")
        entry, low, high = median_difference(times["wrapper, no entry"], times["wrapper"])
        plain = sorted(times["no agent"])[len(times["no agent"]) // 2]
        print(f"the entry alone: {entry * 1e6:+.2f} us per call (95 % {low * 1e6:+.2f} .. {high * 1e6:+.2f}); "
              f"a 1-rank gloo all_reduce here takes {plain * 1e6:.1f} us")
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        x = torch.randn(16, 64)
        built = {}

        entered = integration._Integration._entered

        def ddp_built(hooked, by_hand=False, entry=True):
            def enter():  # a DDP gets the hook at its construction: built after install(), or before it
                if not entry:  # the hook's own frames alone: its entry skipped, as in "wrapper, no entry"
                    integration._Integration._entered = lambda _self, name, a, k: (None, None)
                if hooked:
                    integration.install(current)
                built["ddp"] = torch.nn.parallel.DistributedDataParallel(model)
                if by_hand:  # torch's own allreduce_hook, registered before the agent could wrap it
                    built["ddp"].register_comm_hook(None, allreduce_hook)
                if not hooked:
                    integration.install(current)
            return enter

        def backwards():
            ddp, times = built["ddp"], []
            for _ in range(args.calls):
                began = time.perf_counter()
                ddp(x).sum().backward()
                times.append(time.perf_counter() - began)
            return times

        def ddp_off():
            integration.uninstall()
            integration._Integration._entered = entered

        built["ddp"] = torch.nn.parallel.DistributedDataParallel(model)
        ddp_modes = {"agent, DDP without its hook": (ddp_built(False), integration.uninstall),
                     "agent, DDP with torch's allreduce_hook": (ddp_built(False, by_hand=True), integration.uninstall),
                     "agent, its hook without the entry": (ddp_built(True, entry=False), ddp_off),
                     "agent": (ddp_built(True), integration.uninstall)}
        times, _ = interleave(ddp_modes, backwards, args.rounds)
        plain = sorted(times["agent, DDP without its hook"])[len(times["agent, DDP without its hook"]) // 2]
        for label, base, other in (("the agent's communication hook (entry + allreduce_hook against the reducer's own all-reduce)",
                                    "agent, DDP without its hook", "agent"),
                                   ("torch's allreduce_hook alone (a Python comm hook against the reducer's own all-reduce)",
                                    "agent, DDP without its hook", "agent, DDP with torch's allreduce_hook"),
                                   ("the agent's hook against torch's allreduce_hook (its entry and wrapper)",
                                    "agent, DDP with torch's allreduce_hook", "agent"),
                                   ("the entry alone (the agent's hook with and without it)", "agent, its hook without the entry", "agent")):
            cost, low, high = median_difference(times[base], times[other])
            print(f"DDP: {label} {cost * 1e6:+.2f} us per bucket (95 % {low * 1e6:+.2f} .. {high * 1e6:+.2f})")
        print(f"a forward and backward of the DDP'd MLP (one bucket) here takes {plain * 1e6:.1f} us")
        current.finalize("bench")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""What the window's CPU sampler costs a thread that launches small ops, as a GPU job's host thread does.

Every torch op called from Python lets go of the GIL while it runs, so a sampler thread that wants the GIL gets it
at the next op, and the training thread waits for it back at each of the sampler's file reads (each lets go of the
GIL again): the training thread loses more than the sampler's own CPU time. A CPU job's ops are long and
torch.profiler's cost dwarfs this; on a GPU the host does little but launch, and this is what a window's samples cost.

In one process, rounds in turn: a loop of ``--ops`` in-place adds on a 16-float tensor (~3 us each, the GIL let go
in each) with no sampler, then with ``CpuSampler`` sampling every ``--interval-ms`` (10: a short window's first
second, ``CpuSampler.FIRST_WAIT_S``). The ratio of the loop's median times, and the sampler's CPU time a sample
(``thread_time``), which is the least a sample can cost the loop.

    .venv/bin/python bench/sampler_gil.py [--rounds 9] [--ops 20000] [--interval-ms 10]
"""
import argparse
import collections
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--interval-ms", type=float, default=10.0)
    args = parser.parse_args()
    import torch

    from msprof_agent.collectors.cpu import CpuSampler

    torch.set_num_threads(1)
    x = torch.zeros(16)

    def loop() -> float:
        began = time.perf_counter()
        for _ in range(args.ops):
            x.add_(1.0)
        return time.perf_counter() - began

    plain, sampled, per_sample = [], [], []
    for _ in range(args.rounds):
        plain.append(min(loop() for _ in range(3)))
        queue: collections.deque = collections.deque()
        sampler = CpuSampler(queue, args.interval_ms, adaptive=False)
        sampler.start()
        time.sleep(0.05)  # past the sampler's start-up probe
        thread = next(t for t in threading.enumerate() if t.name == CpuSampler.thread_name)
        cpu_before, samples_before = time.clock_gettime(time.pthread_getcpuclockid(thread.ident)), len(queue)
        sampled.append(min(loop() for _ in range(3)))
        cpu_after, samples_after = time.clock_gettime(time.pthread_getcpuclockid(thread.ident)), len(queue)
        sampler.stop()
        if samples_after > samples_before:
            per_sample.append((cpu_after - cpu_before) / (samples_after - samples_before))
    ratio = statistics.median(sampled) / statistics.median(plain)
    print(f"{args.ops} small ops: plain {statistics.median(plain) * 1e3:.1f} ms, with the CPU sampler every {args.interval_ms:g} ms "
          f"{statistics.median(sampled) * 1e3:.1f} ms: x{ratio:.3f} (medians of {args.rounds} rounds)")
    if per_sample:
        cpu_us = statistics.median(per_sample) * 1e6
        print(f"the sampler's own CPU {cpu_us:.0f} us a sample = {cpu_us / (args.interval_ms * 1e3):.2%} of the interval; "
              f"the loop lost {(ratio - 1) * 100:.1f} %")


if __name__ == "__main__":
    main()

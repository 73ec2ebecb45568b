"""Analysis throughput and peak memory on a generated raw store of N op events.

Writes a store like a long MindSpore run would leave (steps, op batches with 40 op names in 8
types over 2 threads, CPU samples), then times ``msprof-agent analyse`` on it in a child process
and reads the child's peak RSS. Repeats for two step counts at the same op count and timeline
limit, to show memory does not grow with steps. Target: >= 2 M events/s.
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from msprof_agent.store import EventWriter  # noqa: E402

TYPES = ["Conv2D", "MatMul", "BiasAdd", "ReLU", "MaxPool", "Conv2DBackpropInput", "Conv2DBackpropFilter", "ApplyMomentum"]


def generate(profiler_dir, ops_total, steps, batch=50_000):
    writer = EventWriter(profiler_dir, 0, time.time_ns())
    writer.add({"k": "meta", "pid": 1, "rank_id": 0, "framework": "mindspore", "device_target": "CPU",
                "options": {"timeline_limit": 500, "cpu_sampling_interval": 1000}})
    per_step = ops_total // steps
    names = [f"Default/network/{TYPES[i % len(TYPES)]}-op{i}" for i in range(40)]
    step_ns = per_step * 12_000
    t0 = 1_700_000_000_000_000_000
    pending = {"name": [], "type": [], "start": [], "dur": [], "tid": []}
    for n in range(1, steps + 1):
        begin = t0 + (n - 1) * step_ns
        writer.add({"k": "step", "n": n, "start": begin, "end": begin + step_ns, "wait": 1000, "waits": [[begin, begin + 1000]],
                    "fp": None, "bp": None, "win": True})
        for i in range(per_step):
            name = names[i % 40]
            pending["name"].append(name)
            pending["type"].append(name.split("/")[-1].split("-")[0])
            pending["start"].append(begin + 2000 + i * 12_000)
            pending["dur"].append(10_000)
            pending["tid"].append(i % 2)
            if len(pending["start"]) >= batch:
                writer.add(dict(pending, k="ops", source="bench", device="cpu"))
                pending = {k: [] for k in pending}
        if n % 1000 == 0:
            writer.add({"k": "cpu", "ts": (begin + step_ns) // 1_000_000, "user": 50, "sys": 5, "io": 0, "idle": 45,
                        "ctx": 100, "run": 2, "puser": 48, "psys": 3, "rss": 1 << 30})
    if pending["start"]:
        writer.add(dict(pending, k="ops", source="bench", device="cpu"))
    writer.add({"k": "end", "reason": "exit"})
    writer.close()


def measure(ops_total, steps):
    with tempfile.TemporaryDirectory() as out:
        profiler_dir = os.path.join(out, "profiler")
        generate(profiler_dir, ops_total, steps)
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        began = time.perf_counter()
        subprocess.run([sys.executable, "-m", "msprof_agent", "analyse", out], check=True, capture_output=True)
        elapsed = time.perf_counter() - began
        peak_mb = max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, before) / 1024
        return elapsed, peak_mb


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2_000_000)
    args = parser.parse_args()
    for steps in (1000, 4000):
        elapsed, peak = measure(args.ops, steps)
        print(f"{args.ops:,} op events, {steps} steps: analysed in {elapsed:.2f} s = {args.ops / elapsed / 1e6:.2f} M events/s "
              f"(whole process, start-up included); peak RSS {peak:.0f} MB")


if __name__ == "__main__":
    main()

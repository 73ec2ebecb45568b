"""Analysis throughput and peak memory on a generated raw store of N op events.

Writes a store like a long MindSpore run would leave (steps, op batches with 40 op names in 8
types over 2 threads, CPU samples), then runs ``msprof-agent analyse`` on it in a child process,
several times. Each line gives, as medians over the runs, the analysis itself (timed inside the
child around the CLI's work, after the interpreter started and imported the package) and the whole
child process (interpreter start-up and imports included), each with its throughput, and the
child's peak RSS. Repeats for two step counts at the same op count and timeline limit, to show
memory does not grow with steps (target: >= 2 M events/s; a line says which figure meets it). A last
line analyses a long run of always-on step timing, where only a few steps were profiled. The
export lines time ``analyse --export text`` and ``--export db`` on the 1000-step store: what each
adds to the analysis, and the database against the text export (whose bulk is a second JSON timeline).

``--against CHECKOUT`` instead times this checkout's analysis and another checkout's (an earlier
commit's ``git worktree``) on one shared store, in turn, and prints each one's medians and the ratio
pair by pair: a regression shows the day it lands.

``--floors`` times, in turn with this checkout's analysis of the store, the two parts no page can
overlap: loading the raw store alone (a fresh process) and writing as many bytes as the analysis's
timeline file holds at the disk's speed (O_DIRECT, the writer's 4 MB chunks, nothing formatted). Their
sum is what any analysis writing that file takes at least.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from msprof_agent.contract.names import RAW_FOLDER  # noqa: E402
from msprof_agent.frameworks.mindspore.profiler_files import op_batches  # noqa: E402
from msprof_agent.records import FORMAT  # noqa: E402
from msprof_agent.store import EventWriter  # noqa: E402

TARGET = 2e6  # op events per second
TYPES = ["Conv2D", "MatMul", "BiasAdd", "ReLU", "MaxPool", "Conv2DBackpropInput", "Conv2DBackpropFilter", "ApplyMomentum"]
CHILD = """
import os, sys, time
import importlib.util
import msprof_agent.analysis  # start-up: imported before the clock starts (and the pipeline, where the checkout has one)
if importlib.util.find_spec("msprof_agent.pipeline"):
    import msprof_agent.pipeline
from msprof_agent.cli import main
assert msprof_agent.analysis.__file__.startswith(os.getcwd() + os.sep), msprof_agent.analysis.__file__  # the checkout asked for
began = time.perf_counter()
status = main(["analyse"] + sys.argv[1:])
print(time.perf_counter() - began)
sys.exit(status)
"""

FLOORS_CHILD = """
import os, sys, time
import msprof_agent.analysis
from msprof_agent.analysis.rundata import load_rank
from msprof_agent.analysis.opevents import _CHUNK, _aligned, _direct, _pwrite
profiler_dir, size = sys.argv[1], int(sys.argv[2])
began = time.perf_counter()
load_rank(profiler_dir, 0)
loaded = time.perf_counter() - began
chunk = _aligned(_CHUNK)
chunk[:] = ord(" ")
fd = os.open(os.path.join(profiler_dir, "floor.tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
try:
    _direct(fd)
    began = time.perf_counter()
    for at in range(0, size, _CHUNK):
        _pwrite(fd, chunk, at)
    written = time.perf_counter() - began
finally:
    os.close(fd)
    os.remove(os.path.join(profiler_dir, "floor.tmp"))
print(loaded, written)
"""


def generate(profiler_dir, ops_total, steps, profiled=None, batch=50_000):
    """A store of ``steps`` steps, the last ``profiled`` of them (all by default) in a window holding the ops."""
    profiled = steps if profiled is None else profiled
    writer = EventWriter(profiler_dir, 0, time.time_ns())
    writer.add({"k": "meta", "format": FORMAT, "pid": 1, "rank_id": 0, "framework": "mindspore", "device_target": "CPU", "cpus": 2, "memory_bytes": 16 << 30,
                "options": {"timeline_limit": 500, "cpu_sampling_interval": 1000}})
    per_step = ops_total // profiled
    names = [f"Default/network/{TYPES[i % len(TYPES)]}-op{i}" for i in range(40)]
    step_ns = per_step * 12_000
    t0 = 1_700_000_000_000_000_000
    pending = {"name": [], "type": [], "start": [], "dur": [], "tid": []}
    for n in range(1, steps + 1):
        begin = t0 + (n - 1) * step_ns
        window = n > steps - profiled
        writer.add({"k": "step", "n": n, "start": begin, "end": begin + step_ns, "wait": 1000, "waits": [[begin, begin + 1000]],
                    "fp": None, "bp": None, "win": window})
        for i in range(per_step if window else 0):
            name = names[i % 40]
            pending["name"].append(name)
            pending["type"].append(name.split("/")[-1].split("-")[0])
            pending["start"].append(begin + 2000 + i * 12_000)
            pending["dur"].append(10_000)
            pending["tid"].append(i % 2)
            if len(pending["start"]) >= batch:
                _write_ops(writer, pending)
                pending = {k: [] for k in pending}
        if n % 1000 == 0:
            writer.add({"k": "cpu", "ts": (begin + step_ns) // 1_000_000 * 1_000_000, "span": 1000 * step_ns, "user": 50, "sys": 5, "io": 0, "idle": 45,
                        "ctx": 100, "run": 2, "puser": 48, "psys": 3, "rss": 1 << 30})
    if pending["start"]:
        _write_ops(writer, pending)
    writer.add({"k": "end", "reason": "exit"})
    writer.close()


def _write_ops(writer, columns):
    """Ops records as the MindSpore integration writes them (names and types coded per record)."""
    for record in op_batches(columns, "bench"):
        writer.add(record)


def analyse_once(out, extra=(), checkout=ROOT):
    """(seconds of the analysis itself, seconds of the whole child, the child's own peak RSS in MB, its
    CPU seconds), analysed by ``checkout``'s code (first on the child's sys.path)."""
    profiler_dir = os.path.join(out, "profiler")
    for name in os.listdir(profiler_dir):  # every run starts from the raw store alone, as the first did
        if name != RAW_FOLDER:
            os.remove(os.path.join(profiler_dir, name))
    for name in os.listdir(out):  # and without an earlier run's exports
        if name != "profiler":
            shutil.rmtree(os.path.join(out, name))
    os.sync()  # the last run's ~330 MB timeline still being written back would throttle this run's writes
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        began = time.perf_counter()
        env = dict(os.environ, PYTHONPATH=checkout)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # the first run writes both checkouts' bytecode, as an installed package has it
        child = subprocess.Popen([sys.executable, "-c", CHILD, out, *extra], cwd=checkout, env=env, stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage, not the maximum over all children
        whole = time.perf_counter() - began
        child.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        stderr.seek(0)
        if child.returncode:
            raise RuntimeError(f"analyse failed ({child.returncode}): {stderr.read().decode(errors='replace')}")
        return float(stdout.read().split()[-1]), whole, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def measure(args, ops, steps, profiled=None, variants=((),)):
    """Medians over ``args.runs`` analyses of one generated store, per variant of extra CLI arguments:
    (analysis itself, whole child, peak RSS MB, CPU s), one tuple per variant (just the tuple for one variant)."""
    out = tempfile.mkdtemp(prefix="msprof-bench-")
    try:
        generate(os.path.join(out, "profiler"), ops, steps, profiled)
        results = [tuple(statistics.median(c) for c in zip(*[analyse_once(out, extra) for _ in range(args.runs)])) for extra in variants]
    finally:
        shutil.rmtree(out)
    return results[0] if len(variants) == 1 else results


def against(args):
    """This checkout's analysis and ``args.against``'s on one store, in turn (which goes first swaps
    each round); medians and the ratio of each pair (theirs / ours: above 1, this checkout is faster)."""
    other = os.path.abspath(args.against)
    out = tempfile.mkdtemp(prefix="msprof-bench-")
    runs = {"this": [], "other": []}
    try:
        generate(os.path.join(out, "profiler"), args.ops, 1000)
        analyse_once(out, checkout=other)  # warm the page cache and both checkouts' bytecode
        analyse_once(out)
        for round_ in range(args.runs):
            for name in (("this", "other") if round_ % 2 else ("other", "this")):
                runs[name].append(analyse_once(out, checkout=ROOT if name == "this" else other))
    finally:
        shutil.rmtree(out)
    print(f"{args.ops:,} op events, 1000 steps, {args.runs} rounds in turn; medians (min..max):")
    for name, label in (("this", ROOT), ("other", other)):
        itself, whole, peak, cpu = zip(*runs[name])
        print(f"  {label}: analysis itself {statistics.median(itself):.2f} s ({min(itself):.2f}..{max(itself):.2f}), "
              f"whole process {statistics.median(whole):.2f} s, CPU {statistics.median(cpu):.2f} s, peak RSS {statistics.median(peak):.0f} MB")
    for index, label in ((0, "analysis itself"), (1, "whole process"), (3, "CPU time")):
        ratios = [theirs[index] / ours[index] for ours, theirs in zip(runs["this"], runs["other"])]
        print(f"  speed-up over the other checkout, {label}: x{statistics.median(ratios):.2f} pair by pair ({min(ratios):.2f}..{max(ratios):.2f})")
    peaks = [ours[2] / theirs[2] for ours, theirs in zip(runs["this"], runs["other"])]
    print(f"  peak RSS, this / other: x{statistics.median(peaks):.2f}")


def floors(args):
    """This checkout's analysis and the floors (``FLOORS_CHILD``) on one store, in turn; their medians."""
    out = tempfile.mkdtemp(prefix="msprof-bench-")
    profiler_dir = os.path.join(out, "profiler")
    runs = {"analysis": [], "load": [], "write": []}
    try:
        generate(profiler_dir, args.ops, 1000)
        analyse_once(out)  # warms the page cache; its timeline's size is the floor's
        size = sum(os.path.getsize(os.path.join(profiler_dir, n)) for n in os.listdir(profiler_dir) if "timeline_display" in n)
        env = dict(os.environ, PYTHONPATH=ROOT)
        for _ in range(args.runs):
            runs["analysis"].append(analyse_once(out)[0])
            os.sync()
            loaded, written = subprocess.run([sys.executable, "-c", FLOORS_CHILD, profiler_dir, str(size)], env=env, check=True,
                                             capture_output=True, text=True).stdout.split()
            runs["load"].append(float(loaded))
            runs["write"].append(float(written))
    finally:
        shutil.rmtree(out)
    analysis, load, write = (statistics.median(runs[k]) for k in ("analysis", "load", "write"))
    print(f"{args.ops:,} op events, 1000 steps, {args.runs} rounds in turn; medians: the analysis itself {analysis:.2f} s; "
          f"loading the raw store alone {load:.2f} s; its {size / 1e6:.0f} MB timeline written at the disk's speed alone {write:.2f} s "
          f"({size / write / 1e9:.1f} GB/s); the floor they make {load + write:.2f} s, {(load + write) / analysis:.0%} of the analysis")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=3, help="analyses per store; the lines give medians")
    parser.add_argument("--long-steps", type=int, default=200_000, help="steps of the always-on run (its last 10 profiled)")
    parser.add_argument("--against", metavar="CHECKOUT", help="time another checkout's analysis against this one's, in turn, and stop")
    parser.add_argument("--floors", action="store_true", help="time loading alone and the timeline's bytes at the disk's speed, and stop")
    args = parser.parse_args()
    if args.against:
        return against(args)
    if args.floors:
        return floors(args)
    rates = {"the analysis itself": [], "the whole process": []}
    for steps in (1000, 4000):
        itself, whole, peak, _ = measure(args, args.ops, steps)
        rates["the analysis itself"].append(args.ops / itself)
        rates["the whole process"].append(args.ops / whole)
        print(f"{args.ops:,} op events, {steps} steps: analysis itself {itself:.2f} s = {args.ops / itself / 1e6:.2f} M events/s; "
              f"whole process {whole:.2f} s = {args.ops / whole / 1e6:.2f} M events/s (interpreter start-up and imports included); "
              f"peak RSS {peak:.0f} MB (medians of {args.runs} runs)")
    verdicts = [f"{label} {'meets' if min(r) >= TARGET else 'misses'} it ({min(r) / 1e6:.2f} M events/s at worst)" for label, r in rates.items()]
    print(f"target >= {TARGET / 1e6:.0f} M events/s: " + "; ".join(verdicts))
    (plain, _, plain_peak, _), (text, _, text_peak, _), (db, _, db_peak, _) = measure(
        args, args.ops, 1000, variants=((), ("--export", "text"), ("--export", "db")))
    print(f"exports, {args.ops:,} op events, 1000 steps: analysis alone {plain:.2f} s (peak RSS {plain_peak:.0f} MB); "
          f"with --export text {text:.2f} s = {args.ops / text / 1e6:.2f} M events/s (+{text - plain:.2f} s, peak RSS {text_peak:.0f} MB); "
          f"with --export db {db:.2f} s (+{db - plain:.2f} s = {(db - plain) / max(text - plain, 1e-9):.1f}x the text export's, "
          f"peak RSS {db_peak:.0f} MB) (medians of {args.runs} runs)")
    itself, whole, peak, _ = measure(args, 3000, args.long_steps, profiled=10)
    print(f"always-on step timing over a long run ({args.long_steps:,} steps, the last 10 profiled): analysis itself {itself:.2f} s "
          f"= {itself / args.long_steps * 1e6:.1f} us per step; peak RSS {peak:.0f} MB (medians of {args.runs} runs)")


if __name__ == "__main__":
    main()

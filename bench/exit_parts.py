"""What each part of the agent's exit costs: imports, the machine-speed probe, the MFU calibration, each
analysis page, the report's imports and its rendering.

Two generated raw stores, as bench/analysis.py writes them: a steps-only run (step timing, no op
window) and a profiled one. Each is analysed in a fresh child process several times; every part is
timed there (wall, around the call) and the medians printed with each part's share of the whole
exit, parts over 50 ms flagged: those are the ones to make lazy, move to the background analysis
or drop. The child first imports what a profiled job has imported by its exit (numpy, which both
frameworks bring, the agent's session and its CPU sampler), so the parts are what the exit adds; the
package's bytecode is written first, as an installed wheel has it. The calibration is timed twice: as
a first run on a machine does it (no cache) and as every later run reads it from its per-machine cache;
both, and the probe (which runs with the window), are left out of the whole exit.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.analysis import generate  # noqa: E402

LIMIT_S = 0.050
CHILD = r"""
import dataclasses, json, os, sys, tempfile, time
import numpy, msprof_agent.session, msprof_agent.collectors.cpu  # what the job has imported by its exit
times = {}
began = time.perf_counter()
def timed(name, call, *args):
    start = time.perf_counter()
    try:
        return call(*args)
    finally:
        times[name] = times.get(name, 0.0) + time.perf_counter() - start
timed("import the pipeline (the analysis, its pages)", __import__, "msprof_agent.pipeline")
import msprof_agent.analysis as A
import msprof_agent.pipeline as P
from msprof_agent.store import raw_ranks
from msprof_agent.analysis import device_peak
from msprof_agent.collectors.cpu import speed_probe
timed("machine-speed probe (x2: window start and end)", lambda: (speed_probe(), speed_probe()))
device_peak.CPU_PEAK_CACHE = os.path.join(tempfile.mkdtemp(), "cpu_peak.json")
timed("MFU calibration, first run on a machine (no cache)", device_peak.peak_gflops, "CPU")
timed("MFU calibration, cached", device_peak.peak_gflops, "CPU")  # what the flops page then pays
for module in ("info", "step_trace", "timeline"):  # the pages analyse_pages writes itself
    getattr(A, module).write = (lambda name, write: lambda *a: timed("page: " + name, write, *a))(module, getattr(A, module).write)
P.export.write = (lambda write: lambda *a: timed("page: export", write, *a))(P.export.write)
pages = A.pages.registered()  # the registered pages, timed in their order
for page in pages:
    A.pages.unregister(page.name)
for page in pages:
    A.pages.register(page if page.write is None else dataclasses.replace(
        page, write=(lambda name, write: lambda *a: timed("page: " + name, write, *a))(page.noted_as, page.write)))
A.summary.build = (lambda build: lambda *a: timed("summary and findings", build, *a))(A.summary.build)
A.rank.load_rank = (lambda load: lambda *a: timed("loading the raw store", load, *a))(A.rank.load_rank)
timed("report: jinja2's import", __import__, "jinja2")
timed("report: the viewer's imports", __import__, "msprof_agent.viewer.documents")
P.write_report = (lambda write: lambda *a: timed("report: reading and rendering", write, *a))(P.write_report)
profiler_dir = os.path.join(sys.argv[1], "profiler")
P.analyse_rank(profiler_dir, raw_ranks(profiler_dir)[0])  # as the job's exit runs it
outside = ("machine-speed probe", "MFU calibration")  # timed here beside the exit, not in it: the probes run with the window, the calibration is cached
times["the whole exit, as timed here"] = time.perf_counter() - began - sum(v for k, v in times.items() if k.startswith(outside))
print(json.dumps(times))
"""


def run_child(out):
    profiler_dir = os.path.join(out, "profiler")
    for name in os.listdir(profiler_dir):
        if name != "raw":
            os.remove(os.path.join(profiler_dir, name))
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", CHILD, out], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "msprof_agent")], check=True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--ops", type=int, default=200_000, help="op events of the profiled store")
    args = parser.parse_args()
    for label, ops in (("steps only", 0), (f"{args.ops:,} op events", args.ops)):
        out = tempfile.mkdtemp(prefix="msprof-exit-")
        try:
            generate(os.path.join(out, "profiler"), ops, args.steps)
            runs = [run_child(out) for _ in range(args.runs)]
        finally:
            shutil.rmtree(out)
        whole = statistics.median(r["the whole exit, as timed here"] for r in runs)
        print(f"{label}, {args.steps} steps: medians of {args.runs} fresh processes")
        for part in runs[0]:
            value = statistics.median(r.get(part, 0.0) for r in runs)
            flag = "  over 50 ms" if value > LIMIT_S and not part.startswith("the whole") else ""
            print(f"  {part:55s} {value * 1000:8.1f} ms  {value / whole:6.1%}{flag}")


if __name__ == "__main__":
    main()

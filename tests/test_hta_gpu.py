"""HTA's current release (``traceinsight`` 0.6, the renamed HolisticTraceAnalysis) on our export of real H200 stores.

Each store is analysed offline with ``msprof_agent analyse DIR --export text`` (the kind that writes the HTA trace)
and traceinsight, in its own cached venv, runs its temporal breakdown, idle-time breakdown, kernel breakdown and
launch statistics on the trace. Judged by the numbers it returns:

- its busy share (100 - its ``idle_time_pctg``) within 2 points of ours on the same span. HTA's temporal breakdown
  covers the whole trace, from its first kernel's start to its last kernel's end (the kernels it keeps: those whose
  launch it finds by correlation); ours (``summary["device"]["busy_share"]``) covers the steady steps' host
  intervals. So our figure is recomputed by our own analysis (``device.step_rows``: activities merged across streams,
  clipped to the interval) over one interval equal to HTA's span, read back from HTA (its ``min_ts`` plus its first
  kernel's ``ts``, on the trace's ``time_base``). Where no pause of the agent's (the profiler's start-up) falls in
  that span, HTA's figure is also within 2 points of the summary's own (gpt 55.2 against 55.9, tiny 2.7 and 2.7);
  where one does (window_big: 249 ms of its 360 ms), HTA counts it as idle (25 % busy) and the steady steps do not (78 %);
- every device activity of the store reaches HTA linked to a launch (with launch records), most of them without;
- its idle breakdown runs, finds the idle time ours does on that span, and gives its host wait (the next launch came
  after the device went idle) the share of it that ours gives its causes of that kind (``LAUNCHED_LATE``), within 15 points.

HTA's default rounding of ns-resolution traces (start up, end down to the microsecond) leaves sub-microsecond
activities with negative lengths and its temporal breakdown then fails an assertion (``non_compute_time >= 0``),
so HTA runs with its own switch ``HTA_DISABLE_NS_ROUNDING=1``.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess

import pytest

from conftest import PY, client_python, hook_env

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "gpu-h200")
FIXTURES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "shared", "fixtures", "gpu-h200")
PACKAGE = "traceinsight==0.6.1"
VENVS = [("traceinsight", PACKAGE, "client")]  # made ahead (conftest)
pytestmark = pytest.mark.client
STORES = ("gpt_default", "tiny_default", "window_big")
# Our idle causes where the device waited for the host's next launch, which HTA calls host_wait whatever held the host
# (its own work, a sync, the batch, the agent's pauses); the rest, "queued", is its kernel_wait and other.
LAUNCHED_LATE = ("host", "sync", "data", "agent")

HTA_RUN = """
import json, sys
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
temporal = analysis.get_temporal_breakdown(visualize=False).to_dict("records")[0]
idle, _ = analysis.get_idle_time_breakdown(visualize=False)
kernels = analysis.t.get_trace(0)
kernels = kernels[kernels["stream"].ne(-1)]
first = float(kernels["ts"].min())
launches = analysis.get_cuda_kernel_launch_stats(visualize=False)
kinds = analysis.get_gpu_kernel_breakdown(visualize=False)[0]
print(json.dumps({"temporal": temporal, "idle": idle.to_dict("records"), "kernels": int(len(kernels)),
                  "span_us": [analysis.t.min_ts + first, analysis.t.min_ts + first + float(temporal["kernel_time(us)"])],
                  "launch_stats": int(sum(len(v) for v in launches.values())), "kernel_kinds": kinds.to_dict("records")}))
"""


@pytest.fixture(scope="module")
def traceinsight():
    return client_python("traceinsight", PACKAGE)


def _store(name):
    if name.startswith("window_"):
        path = os.path.join(FIXTURES, name, "raw_rank_0.jsonl")
        if not os.path.exists(path):
            pytest.skip(f"../shared/fixtures/gpu-h200/{name} is not beside this checkout")
        with open(path, "rb") as handle:
            return handle.read()
    with gzip.open(os.path.join(DATA, f"{name}.jsonl.gz")) as handle:
        return handle.read()


@pytest.fixture(scope="module", params=STORES)
def judged(request, traceinsight, tmp_path_factory):
    """One store exported (``--export text``), read by traceinsight, and our own figures over HTA's span."""
    from msprof_agent.analysis import DeviceActivity
    from msprof_agent.analysis.device import step_rows
    from msprof_agent.analysis.rundata import load_rank
    from msprof_agent.contract.timebase import timeline_base

    name = request.param
    root = str(tmp_path_factory.mktemp(f"hta_{name}"))
    raw = os.path.join(root, "profiler", "raw", "rank_0")
    os.makedirs(raw)
    with open(os.path.join(raw, "1.jsonl"), "wb") as handle:
        handle.write(_store(name))
    proc = subprocess.run([PY, "-m", "msprof_agent", "analyse", root, "--export", "text"], env=hook_env(hook=False),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "failed" not in proc.stderr, proc.stderr[-3000:]
    directory = os.path.join(root, "hta_trace")
    proc = subprocess.run([traceinsight, "-c", HTA_RUN, directory], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, HTA_DISABLE_NS_ROUNDING="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    hta = json.loads(proc.stdout.strip().splitlines()[-1])
    with open(os.path.join(directory, os.listdir(directory)[0])) as handle:
        trace = json.load(handle)
    base = timeline_base(trace["traceEvents"])
    data = load_rank(os.path.join(root, "profiler"), 0)
    activity = DeviceActivity(data)
    lo, hi = (base + round(us * 1000) for us in hta["span_us"])
    (ours,) = step_rows(data, activity, [{"n": 0, "start": lo, "end": hi}])
    with open(os.path.join(root, "profiler", "summary_0.json")) as handle:
        summary = json.load(handle)
    yield {"name": name, "hta": hta, "ours": ours, "summary": summary["device"], "trace": trace, "activities": len(activity.index)}
    shutil.rmtree(root, ignore_errors=True)


def test_hta_busy_share_agrees_with_ours_on_its_span(judged):
    hta, ours = judged["hta"], judged["ours"]
    hta_busy = 100 - hta["temporal"]["idle_time_pctg"]
    our_busy = 100 * ours["busy_ms"] / ours["step_ms"]
    print(f"{judged['name']}: HTA busy {hta_busy:.2f} % of {hta['temporal']['kernel_time(us)'] / 1e3:.1f} ms, ours {our_busy:.2f} % on that span; "
          f"summary busy_share {100 * judged['summary']['busy_share']:.2f} % over the steady steps")
    assert abs(hta_busy - our_busy) <= 2.0, (hta_busy, our_busy, hta["temporal"])
    if not ours["idle"]["agent"]:  # no profiler start-up in HTA's span: it reads much as the steady steps do
        assert abs(hta_busy - 100 * judged["summary"]["busy_share"]) <= 2.0, (hta_busy, judged["summary"]["busy_share"])
    assert hta["temporal"]["compute_time_pctg"] > 0


def test_hta_finds_each_activity_and_its_launch(judged):
    hta, trace = judged["hta"], judged["trace"]
    properties = trace["deviceProperties"]
    assert properties[0]["name"] == "NVIDIA H200" and properties[0]["id"] == 0
    if judged["name"].endswith("_default"):  # stores with launch records: every activity linked
        assert properties[0]["totalGlobalMem"] > 100 * 2**30
        assert hta["kernels"] == judged["activities"], (hta["kernels"], judged["activities"])
    else:  # paired in order
        assert hta["kernels"] >= 0.9 * judged["activities"], (hta["kernels"], judged["activities"])
    assert hta["launch_stats"] > 0.5 * hta["kernels"]  # launch statistics: kernels (not copies) with their runtime call
    assert {k["kernel_type"] for k in hta["kernel_kinds"]} >= {"COMPUTATION"}


def test_hta_idle_breakdown_runs_and_names_the_host(judged):
    hta, ours = judged["hta"], judged["ours"]
    idle = {}
    for row in hta["idle"]:
        idle[row["idle_category"]] = idle.get(row["idle_category"], 0.0) + row["idle_time"]
    total = sum(idle.values())
    assert total > 0 and set(idle) <= {"host_wait", "kernel_wait", "other"}, idle
    # the same span's idle time, in ms: HTA's (us) against ours
    assert abs(total / 1e3 - ours["idle_ms"]) <= 0.02 * ours["step_ms"], (total, ours)
    hta_host = idle.get("host_wait", 0.0) / total
    our_host = sum(ours["idle"][cause] for cause in LAUNCHED_LATE) / max(ours["idle_ms"], 1e-9)
    print(f"{judged['name']}: the next launch came late in {100 * hta_host:.1f} % of idle by HTA, {100 * our_host:.1f} % by ours; "
          f"HTA {idle}, ours {ours['idle']}; {hta['kernels']} of {judged['activities']} activities linked")
    assert abs(hta_host - our_host) <= 0.15, (idle, ours["idle"])

"""The GPU's analysis on real H200 stores, offline: what each job is bound by, the device's busy share, FLOPs against the
matmuls counted by hand, GPU memory against the job's own ``torch.cuda.max_memory_allocated()``.

Two sets of stores: ``../shared/fixtures/gpu-h200/window_*`` (recorded before launches were linked) and
``tests/data/gpu-h200/*.jsonl.gz`` (``bench/gpu.py``'s default-mode runs: launch records, CUDA-event step times,
allocator peaks), with the jobs' own figures in ``tests/data/gpu-h200/jobs.json``.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest

from msprof_agent.contract.cuda import is_runtime_call

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "shared", "fixtures", "gpu-h200")
DATA = os.path.join(HERE, "data", "gpu-h200")
pytestmark = pytest.mark.unit  # offline analysis of stored runs: no framework, no GPU

HOST_ONLY = ("aten::empty", "aten::empty_strided", "aten::view", "aten::as_strided", "aten::t", "aten::transpose", "aten::reshape")


def _analysed(root: str, name: str, lines: bytes) -> dict:
    raw = os.path.join(root, name, "profiler", "raw", "rank_0")
    os.makedirs(raw)
    with open(os.path.join(raw, "1.jsonl"), "wb") as handle:
        handle.write(lines)
    proc = subprocess.run([sys.executable, "-m", "msprof_agent", "analyse", os.path.join(root, name)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    with open(os.path.join(root, name, "profiler", "summary_0.json")) as handle:
        summary = json.load(handle)
    summary["_stderr"] = proc.stderr
    with open(os.path.join(root, name, "profiler", "gpu_timeline_display_0.json")) as handle:
        summary["_timeline"] = json.load(handle)
    return summary


@pytest.fixture(scope="module")
def summaries(tmp_path_factory):
    """Every store analysed once, by the CLI, as a user would."""
    root = str(tmp_path_factory.mktemp("gpu"))
    out = {}
    for name in ("window_big", "window_tiny", "window_data"):
        path = os.path.join(FIXTURES, name, "raw_rank_0.jsonl")
        if os.path.exists(path):
            with open(path, "rb") as handle:
                out[name] = _analysed(root, name, handle.read())
    for name in ("gpt_default", "tiny_default", "gpt_compile_default"):
        with gzip.open(os.path.join(DATA, f"{name}.jsonl.gz")) as handle:
            out[name] = _analysed(root, name, handle.read())
    yield out
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def jobs():
    with open(os.path.join(DATA, "jobs.json")) as handle:
        return json.load(handle)


def _shared(summaries, name):
    if name not in summaries:
        pytest.skip(f"../shared/fixtures/gpu-h200/{name} is not beside this checkout")
    return summaries[name]


def test_each_job_gets_the_verdict_of_what_bounds_it(summaries):
    """GPU-bound, launch-bound and data-bound, as the jobs' ground truth says (the fixtures' README): the GPT's window
    alone (hand-overs in it) and with its unprofiled steps' CUDA-event times; the tiny model in both; the data wait."""
    assert _shared(summaries, "window_big")["verdict"] == "GPU-bound"
    assert _shared(summaries, "window_tiny")["verdict"] == "launch-bound"
    assert _shared(summaries, "window_data")["verdict"] == "data-bound"
    assert summaries["gpt_default"]["verdict"] == "GPU-bound"
    assert summaries["tiny_default"]["verdict"] == "launch-bound"
    assert summaries["gpt_compile_default"]["verdict"] == "GPU-bound"  # under torch.compile: fewer, fused kernels, the GPU still the limit
    data = summaries["window_data"]["findings"][0] if "window_data" in summaries else None
    if data is not None:
        assert data["id"] == "data_wait" and 38 <= data["ms_per_step"] <= 46  # the dataset sleeps 40 ms a batch


def test_the_device_busy_share_matches_the_ground_truth(summaries):
    """Busy: kernels, copies and fills merged across streams, within each steady step (README: 73-86 % in the GPT's
    window, 7-9 % in the tiny one's, ~30 % with the data wait); against unprofiled steps the GPT's is ~96 %."""
    big, tiny, data = (_shared(summaries, n)["device"] for n in ("window_big", "window_tiny", "window_data"))
    assert 0.73 <= big["busy_share"] <= 0.86
    assert 0.05 <= tiny["busy_share"] <= 0.10 and tiny["idle_ms"]["host"] > 0.8 * sum(tiny["idle_ms"].values())
    assert 0.22 <= data["busy_share"] <= 0.35 and data["idle_ms"]["data"] > 0.6 * sum(data["idle_ms"].values())
    gpt = summaries["gpt_default"]["device"]  # against steps 6-10, before the window: the plain step's 96 %
    assert 0.92 <= gpt["busy_share_unprofiled"] <= 1.0 and gpt["unprofiled_steps"] == 5


def test_flops_count_each_matmul_once(summaries, jobs):
    """FLOPs a step within 10 % of the matmuls counted by hand (the full attention square, the convention said); an op
    and the op it calls (aten::matmul -> aten::mm, aten::linear -> aten::addmm) are one count."""
    count = jobs["gpt_default"]["matmul_flops"]["full"]
    for name in ("gpt_default", "window_big"):
        if name in summaries:
            flops = summaries[name]["flops"]
            assert abs(flops["mflops_per_step"] * 1e6 / count - 1) < 0.10, (name, flops["mflops_per_step"])
            assert "full square" in flops["convention"]


def test_mfu_uses_the_device_clock_and_the_dtype_peak(summaries, jobs):
    """MFU over the steps without the profiler: FLOPs a step / their median CUDA-event time / the bf16 peak (the job
    ran under bf16 autocast), within 10 % of the hand count over the job's own step time."""
    for name, plain in (("gpt_default", "gpt_plain"), ("gpt_compile_default", "gpt_compile_plain")):
        mfu = summaries[name]["flops"]["mfu"]
        assert "CUDA events" in mfu["definition"] and "BF16" in mfu["peak_source"]
        truth = jobs[name]["matmul_flops"]["full"] / (jobs[plain]["gpu_step_ms_median"] / 1e3) / 989e12
        assert abs(mfu["unprofiled"]["ratio"] / truth - 1) < 0.10, (name, mfu, truth)


def test_gpu_memory_is_the_allocators_peak(summaries, jobs):
    for name in ("gpt_default", "tiny_default"):
        memory = summaries[name]["memory"]
        assert memory["peak_allocated_mb"] == pytest.approx(jobs[name]["max_memory_allocated"] / 2**20, rel=0.01)
        assert "max_memory_allocated" in memory["source"]


def test_a_gpu_profile_leads_with_device_time_by_launching_op(summaries):
    """The top operators are device time grouped by the host op that launched it; no host-only op (allocation, views)
    and no runtime call heads a GPU profile; the stderr table says it."""
    for name in ("gpt_default", "tiny_default", "window_big"):
        if name not in summaries:
            continue
        top = [o["op_type"] for o in summaries[name]["top_op_types"][:5]]
        assert not [t for t in top if t in HOST_ONLY or is_runtime_call(t)], (name, top)
    linked = summaries["gpt_default"]["device"]
    assert linked["launch_links"] and linked["top_ops"][0]["op_type"] in ("aten::mm", "aten::addmm")
    by_op = sum(k["share"] for k in linked["top_kernels"] if k["launched_by"])
    assert by_op > 0.9 * sum(k["share"] for k in linked["top_kernels"])
    assert "GPU busy" in summaries["gpt_default"]["_stderr"] and "GPU memory" in summaries["gpt_default"]["_stderr"]


def test_gpu_advice_never_repeats_what_the_job_does(summaries):
    """The GPT ran under bf16 autocast with a fused AdamW: the GPU-bound advice says neither."""
    finding = next(f for f in summaries["gpt_default"]["findings"] if f["id"] == "gpu_bound")
    settings = finding["evidence"]["settings"]
    assert settings["autocast"] == "bfloat16" and settings["optimizer_fused"]
    assert "autocast" not in finding["action"] and "fused=True" not in finding["action"]
    assert "torch.compile" in finding["action"]  # the job is eager: fusing its elementwise kernels is what is left
    compiled = next(f for f in summaries["gpt_compile_default"]["findings"] if f["id"] == "gpu_bound")
    assert compiled["evidence"]["settings"]["compiled"] and "torch.compile" not in compiled["action"]


def test_counted_inside_marks_every_ancestor_of_a_count():
    import numpy as np

    from msprof_agent.analysis.flops import counted_inside

    # 0 linear > 1 addmm ; 2 matmul > 3 mm ; 4 relu (alone) ; 5 outer > 6 mid > 7 leaf
    parent = np.array([-1, 0, -1, 2, -1, -1, 5, 6])
    flops = np.array([np.nan, 10.0, 8.0, 8.0, 1.0, np.nan, np.nan, 3.0])
    assert counted_inside(flops, parent).tolist() == [True, False, True, False, False, True, True, False]


def test_the_report_shows_the_gpu(summaries, tmp_path_factory):
    """The Overview's GPU card: the busy share against the unprofiled steps, the idle by cause, GPU memory, MFU, and the
    kernels with the op that launched each."""
    report = os.path.join(summaries["gpt_default"]["profiler_dir"], "report_0.html")
    if not os.path.exists(report):
        pytest.skip("the viewer extra (jinja2) is not installed: no report")
    with open(report) as handle:
        page = handle.read()
    card = page[page.index('id="gpu"'):]
    card = card[:card.index("</section>")]
    for text in ("device busy, steps without the profiler", "waiting for the host to launch", "memory peak allocated", "MFU",
                 "aten::_cudnn_attention_backward", "nvjet_sm90"):
        assert text in card, text


def _device_page(report: str) -> str:
    """The GPU page's block of a report_{r}.html's text: up to the next page's, or the end of the pages."""
    block = report[report.index('<div class="report-page" id="device">'):report.index("</main>")]
    end = block.find('<div class="report-page"', 1)
    return block if end < 0 else block[:end]


@pytest.mark.parametrize("name", ["gpt_default", "tiny_default"])
def test_the_gpu_page_shows_the_device_files(summaries, name):
    """The GPU page (viewer page ``device``) reads device_steps, gpu_kernels and gpu_op_type_info through their
    declared readers: each step's busy and idle time by cause as the CSV has it (the chart and the table), every
    kernel with the op that launched it, every kernel type, the allocator's peaks and the GPU's findings."""
    from markupsafe import escape

    from conftest import read_csv
    from msprof_agent.contract.columns import DEVICE_IDLE_COLUMNS
    from test_viewer import charts_of, served

    profiler = summaries[name]["profiler_dir"]
    report = os.path.join(profiler, "report_0.html")
    if not os.path.exists(report):
        pytest.skip("the viewer extra (jinja2) is not installed: no report")
    with open(report, encoding="utf-8") as handle:
        text = handle.read()
    page = _device_page(text)
    assert '<a href="#device">GPU</a>' in text
    header, *steps = read_csv(os.path.join(profiler, "device_steps_0.csv"))
    column = {title: i for i, title in enumerate(header)}
    chart = {trace["name"]: trace for trace in charts_of(text)["device-steps"]["data"]}
    assert chart["Busy"]["x"] == [int(row[0]) for row in steps]
    assert chart["Busy"]["y"] == [float(row[column["device_busy(ms)"]]) for row in steps]
    for row in steps:
        cells = page[page.index(f'<td data-col="step" data-v="{float(row[0])!r}">'):]
        cells = cells[:cells.index("</tr>")]
        for key, title in [("busy_ms", "device_busy(ms)"), ("idle_ms", "device_idle(ms)"), *((f"idle_{c}", t) for c, t in DEVICE_IDLE_COLUMNS.items())]:
            assert f'data-col="{key}" data-v="{float(row[column[title]])!r}"' in cells, (row[0], key)
    for cause, title in DEVICE_IDLE_COLUMNS.items():
        idle = [float(row[column[title]]) for row in steps]
        assert [trace["y"] for label, trace in chart.items() if cause_of(label) == cause] == ([idle] if any(idle) else [])
    _, *kernels = read_csv(os.path.join(profiler, "gpu_kernels_0.csv"))
    _, *types = read_csv(os.path.join(profiler, "gpu_op_type_info_0.csv"))
    assert kernels and types
    for kernel, _kind, launched_by, *_ in kernels:
        assert f'data-search="{escape(f"{kernel} {launched_by}".lower())}"' in page, kernel
    for kernel_type, *_ in types:
        assert f'data-search="{escape(kernel_type.lower())}"' in page, kernel_type
    memory = summaries[name]["device"]["memory"]
    assert f'<td data-key="peak allocated (MiB)">{memory["peak_allocated_mb"]:.0f}</td>' in page
    gpu_findings = [f["id"] for f in summaries[name]["findings"] if f["id"] in ("gpu_bound", "launch_bound", "host_sync")]
    assert gpu_findings and all(f'data-id="{finding}"' in page for finding in gpu_findings)
    assert 'data-id="warm_up"' not in page  # the overview's findings, not the GPU's
    with served(os.path.dirname(os.path.dirname(profiler))) as server:
        status, _, viewed = server.get(f"/run/device?run={name}&rank=0")
    assert status == 200 and "<h1>GPU</h1>" in viewed and 'data-page="device"' in viewed and 'id="device-kernels"' in viewed


def cause_of(label: str) -> str | None:
    """The idle cause a chart trace is named after (``IDLE_WORDS``), None for the busy time."""
    from msprof_agent.contract.columns import IDLE_WORDS

    return next((cause for cause, words in IDLE_WORDS.items() if label == f"Idle {words}"), None)


def test_a_run_on_no_gpu_has_no_gpu_page(tmp_path):
    """A CPU run writes none of the device files: its report and the viewer's page bar have no GPU page."""
    from msprof_agent.viewer import documents, sections
    from test_viewer import make_fixture, served

    make_fixture(str(tmp_path / "s" / "job" / "profiler"), framework="torch")
    run = sections.scan(str(tmp_path / "s"))["job"]
    assert "device" not in documents.report_pages(run, 0)
    with served(tmp_path / "s") as server:
        overview = server.get("/run/overview?run=job&rank=0")[2]
    assert 'data-page="device"' not in overview and 'data-page="resources"' in overview


@pytest.mark.parametrize("name", ["gpt_default", "tiny_default"])
def test_launches_paired_in_order_match_the_launch_records(name, tmp_path):
    """Stores without launch records (the window_* fixtures) link each activity to its launch by pairing them in time
    order (``DeviceActivity.calls``); on stores with the records, that guess finds the call the records name."""
    from msprof_agent.analysis import DeviceActivity
    from msprof_agent.analysis.rundata import load_rank

    raw = tmp_path / "profiler" / "raw" / "rank_0"
    raw.mkdir(parents=True)
    with gzip.open(os.path.join(DATA, f"{name}.jsonl.gz")) as handle:
        (raw / "1.jsonl").write_bytes(handle.read())
    data = load_rank(str(tmp_path / "profiler"), 0)
    activity = DeviceActivity(data)
    recorded, source = activity.calls(data)
    assert source == "launch records" and (recorded >= 0).all()
    activity.launched = None  # as read from a store without launch records
    paired, source = activity.calls(data)
    assert source == "in order" and (paired == recorded).mean() > 0.98


@pytest.mark.parametrize("name", ["gpt_default", "window_big"])
def test_the_timeline_shows_each_stream_with_arrows_from_the_launches(summaries, name):
    """Device activities on a track per stream; with launch records, an arrow from each launching runtime call to its
    activity (both ends on a slice that starts there); without them, no arrow (a guess is not drawn)."""
    events = _shared(summaries, name)["_timeline"]
    device_pid = next(e["pid"] for e in events if e.get("ph") == "M" and e["args"].get("name") == "Device Kernels")
    tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == device_pid}
    kernels = {(e["tid"], e["ts"]) for e in events if e.get("ph") == "X" and e["pid"] == device_pid}
    assert tracks == {7: "Stream 7"} and {tid for tid, _ in kernels} == {7}
    starts, ends = [e for e in events if e.get("ph") == "s"], [e for e in events if e.get("ph") == "f"]
    if name == "window_big":
        assert not starts and not ends
        return
    calls = {(e["pid"], e["tid"], e["ts"]) for e in events if e.get("ph") == "X" and is_runtime_call(e["name"])}
    assert len(ends) == len(starts) > 0.95 * len(kernels)
    assert all((e["tid"], e["ts"]) in kernels for e in ends)
    assert all((e["pid"], e["tid"], e["ts"]) in calls for e in starts)


def test_the_hta_export_of_a_gpu_run_keeps_within_timeline_limit(tmp_path):
    """At a 3 MB ``timeline_limit`` (the gpt store's export is 10 MB) the HTA trace stays under it, keeping the longest
    device activities, each with the runtime call that launched it."""
    raw = tmp_path / "profiler" / "raw" / "rank_0"
    raw.mkdir(parents=True)
    with gzip.open(os.path.join(DATA, "gpt_default.jsonl.gz")) as handle:
        (raw / "1.jsonl").write_bytes(handle.read().replace(b'"timeline_limit":500', b'"timeline_limit":3'))
    proc = subprocess.run([sys.executable, "-m", "msprof_agent", "analyse", str(tmp_path), "--export", "text"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and "failed" not in proc.stderr, proc.stderr
    (path,) = (tmp_path / "hta_trace").iterdir()
    assert os.path.getsize(path) <= 3_000_000
    events = json.loads(path.read_bytes())["traceEvents"]
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    launches = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime"}
    assert 1000 < len(kernels) < 5880 and all(e["args"]["correlation"] in launches for e in kernels)
    shortest_kept = min(e["dur"] for e in kernels)
    assert shortest_kept > 5.0  # 7.7 us here: the shortest (0.7 us fills and up) went first


def test_gpu_memory_growth_is_a_leak_costed_by_when_it_fills_the_gpu(tmp_path):
    """The allocator's bytes in use, read at every 10th step end of the whole run, growing 64 MiB a step: a memory
    finding on the device, with the step at which it would fill the GPU's unreserved memory; flat, none."""
    with gzip.open(os.path.join(DATA, "gpt_default.jsonl.gz")) as handle:
        lines = handle.read()
    base = 4 << 30

    def with_series(slope):
        series = [[n, base + slope * n] for n in range(10, 61, 10)]
        return lines + json.dumps({"k": "dsteps", "steps": [], "allocated": series}).encode() + b"\n"

    leaking = _analysed(str(tmp_path), "leaking", with_series(64 << 20))
    finding = next(f for f in leaking["findings"] if f["id"] == "gpu_memory_growth")
    assert finding["evidence"]["bytes_per_step"] == 64 << 20 and finding["evidence"]["within_horizon"]
    left = (143155.94 - 5072.0) * (1 << 20)  # the H200's memory less what the allocator reserved at its peak
    assert finding["evidence"]["exhaust_at_step"] == 60 + int(left // (64 << 20))
    assert leaking["verdict"] == "memory-growth"  # it ends the job within a day: it heads the verdict
    flat = _analysed(str(tmp_path), "flat", with_series(0))
    assert not [f for f in flat["findings"] if f["id"] == "gpu_memory_growth"] and flat["verdict"] == "GPU-bound"


def test_the_gpu_page_knows_every_finding_the_gpu_rules_make():
    """The GPU page filters the summary's findings by gpu_rules.FINDING_IDS: a rule added there without its id would vanish from the page."""
    import inspect
    import re

    from msprof_agent.analysis.diagnosis import gpu_rules

    made = set(re.findall(r'make_finding\("(\w+)"', inspect.getsource(gpu_rules)))
    assert made == set(gpu_rules.FINDING_IDS)

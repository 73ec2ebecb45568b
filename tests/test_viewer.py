"""The viewer's API, parsing, safety and report.html.

``make_fixture`` writes a hand-made analysed-output directory: a fixture for unit tests of parsing,
escaping and path safety only. The tests over real profiled MindSpore and PyTorch runs are at the end
and run once ``msprof_agent.analysis`` can analyse them.
"""
import contextlib
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import ROOT, SCRIPTS, free_port, injected_line, overlapping_slices, profile_into, read_csv, read_json, run_script
from msprof_agent.analysis import cluster

EVIL = "<img src=x onerror=alert(1)>"
EVIL_SCRIPT = "</script><script>alert(2)</script>"
OP_TYPES = ["Conv2D", "MatMul", "ReLU", "BiasAdd", EVIL]


def _write_csv(path, header, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def make_fixture(profiler_dir, rank=0, steps=20, rank_size=1, slow=1.0, framework="mindspore", warmup=None):
    """Write every contract file for one rank, with hostile names in op names, types and suggestion text.
    A torch fixture's profiler_info is as the analysis writes it for torch (empty ms_version, pynative);
    ``warmup``: the summary's ``warmup_steps``, left out when None."""
    os.makedirs(profiler_dir, exist_ok=True)
    r = rank
    p = lambda name: os.path.join(profiler_dir, name)  # noqa: E731
    with open(p(f"profiler_info_{r}.json"), "w") as f:
        torch = framework == "torch"
        json.dump({"context_mode": "pynative" if torch else "graph", "rank_id": r, "ms_version": "" if torch else "2.10.0",
                   "parallel_mode": "data_parallel", "stage_num": 1, "rank_size": rank_size, "framework": framework,
                   "framework_version": "2.13.0+cpu" if torch else "2.10.0"}, f)
    rows, t = [], 1_000_000_000
    totals = {"interval": 0, "fpbp": 0, "tail": 0}
    for n in range(1, steps + 1):
        interval = int((50_000 + 1_000 * (n % 7)) * slow)   # 10 ns units: 0.5 ms + ...
        fpbp = int((800_000 + 10_000 * (n % 5)) * slow)
        tail = int(30_000 + 500 * (n % 3))
        start, fp = t, t + interval
        bp, end = fp + fpbp, fp + fpbp + tail
        rows.append([n, start, end, end - start, fp, bp, interval, fpbp, tail])
        totals["interval"] += interval
        totals["fpbp"] += fpbp
        totals["tail"] += tail
        t = end
    avg = {k: v / steps for k, v in totals.items()}
    rows.append(["-", "", "", avg["interval"] + avg["fpbp"] + avg["tail"], "", "", avg["interval"], avg["fpbp"], avg["tail"]])
    _write_csv(p(f"step_trace_raw_{r}_detail_time.csv"),
               ["step_num", "start_point", "end_point", "total", "fp_point", "bp_point", "iteration_interval", "fp_and_bp", "tail"], rows)
    with open(p(f"step_trace_point_info_{r}.json"), "w") as f:
        json.dump({"fp_start": "Default/network/Conv2D-op1", "bp_end": "Gradients/" + EVIL}, f)
    type_rows, detail_rows, flops_rows = [], [], []
    total_all = sum(10.0 * (i + 1) for i in range(len(OP_TYPES)))
    for i, op_type in enumerate(OP_TYPES):
        total = 10.0 * (i + 1)
        type_rows.append([op_type, steps * 2, 2, total, total / (steps * 2), total / total_all])
        for j in range(2):
            name = f"{op_type}-op{j}" if op_type != EVIL else EVIL
            full = f"Default/network/{name}"
            detail_rows.append(["CPU", op_type, name, full, steps, total / 2, total / 2 / steps, total / 2 / total_all, "Default", 1234])
            flops_rows.append([full, 100.0 * (i + 1), 1.5 * (i + 1), 10.0 * j, 0.25 * j])
    _write_csv(p(f"cpu_op_type_info_{r}.csv"), ["op_type", "type_occurrences", "execution_frequency(per-step)",
                                                "total_compute_time(ms)", "avg_time(ms)", "percent"], type_rows)
    _write_csv(p(f"cpu_op_detail_info_{r}.csv"), ["op_side", "op_type", "op_name", "full_op_name", "op_occurrences", "op_total_time(ms)",
                                                  "op_avg_time(ms)", "total_proportion", "subgraph", "pid"], detail_rows)
    _write_csv(p(f"cpu_op_shape_info_{r}.csv"), ["op_type", "op_name", "input_shape", "op_occurrences", "self_time(ms)", "total_time(ms)"],
               [[row[1], row[3], f"[[{8 * (i + 1)},3,32,32]]", row[4], row[5], row[5] * 1.5] for i, row in enumerate(detail_rows)])
    _write_csv(p(f"flops_{r}.txt"), ["op_full_name", "MFLOPs(10^6 cube)", "GFLOPS(10^9 cube)", "MFLOPs(10^6 vector)", "GFLOPS(10^9 vector)"],
               flops_rows)
    with open(p(f"flops_summary_{r}.json"), "w") as f:
        json.dump({"FLOPs": 1234.5, "FLOPS": 6.78, "FLOPS_Utilization": 0.0}, f)
    with open(p(f"dataset_iterator_profiling_{r}.txt"), "w") as f:
        for n in range(1, steps + 1):
            f.write(f"0 0 {n} {0.5 + (n % 4) * 0.25} {1700000000000 + n}\n")
            f.write(f"1 64 {n} {0 if n % 4 == 0 else 8} {1700000000000 + n}\n")
    pipeline = [[0, "BatchOp", 1, "[2, 2, 3]", 2.333, 4, 0.9, 1000, -1, "[1]"],
                [1, "MapOp", 2, "[60, 64, 62]", 62.0, 64, 0.97, 1000, 0, "[2]"],
                [2, "GeneratorOp", 1, "[60, 61, 63]", 61.333, 64, 0.96, 1000, 1, "[]"]]
    _write_csv(p(f"minddata_pipeline_raw_{r}.csv"), ["op_id", "op_type", "num_workers", "output_queue_size", "output_queue_average_size",
                                                     "output_queue_length", "output_queue_usage_rate", "sample_interval", "parent_id",
                                                     "children_id"], pipeline)
    samples = 10
    with open(p(f"minddata_cpu_utilization_{r}.json"), "w") as f:
        json.dump({"cpu_processor_num": 2, "sampling_interval": 1000, "time_stamp": [1700000000000 + 1000 * i for i in range(samples)],
                   "device_info": {"user_utilization": [40 + i for i in range(samples)], "sys_utilization": [5] * samples,
                                   "io_utilization": [0] * samples, "idle_utilization": [55 - i for i in range(samples)],
                                   "context_switch_count": [100] * samples, "runnable_process": [2] * samples},
                   "process_info": {"user_utilization": [30 + i for i in range(samples)], "sys_utilization": [3] * samples},
                   "op_info": [{"op_id": 1, "op_type": "MapOp", "metrics": {"user_utilization": [10] * samples, "sys_utilization": [1] * samples}}]}, f)
    with open(p(f"memory_usage_summary_{r}.json"), "w") as f:
        json.dump({"capacity": 15.5, "allocations": 200, "deallocations": 190, "peak_mem": 1.25, "static_mem": 0.5}, f)
    with open(p(f"memory_usage_details_{r}.json"), "w") as f:
        json.dump({"0": {"graph_id": 0, "static_mem": 0.5, "lines": [500.0, 750.0, 1250.0, 1000.0, 600.0], "nodes": [], "fp_start": 1, "bp_end": 3,
                         "breakdowns": []}}, f)
    hccl = [[n, 0.2 * slow, 0.05, "{}", "{}"] for n in range(1, steps + 1)] + [["-", 0.2 * slow, 0.05, "{}", "{}"]]
    _write_csv(p(f"hccl_raw_{r}.csv"), ["step_num", "communication_cost", "wait_cost", "link_info", "communication_operator_cost"], hccl)
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "Step Trace"}},
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "graph 0"}},
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "graph 1"}},
              {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "CPU ops"}}]
    for row in rows[:-1]:
        events.append({"ph": "X", "name": f"Step {row[0]}", "pid": 1, "tid": 1 + row[0] % 2, "ts": row[1] / 100, "dur": row[3] / 100})
        events.append({"ph": "X", "name": EVIL, "pid": 2, "tid": 7, "ts": row[4] / 100, "dur": row[7] / 100})
    with open(p(f"cpu_timeline_display_{r}.json"), "w") as f:
        json.dump(events, f)
    with open(p(f"cpu_timeline_summary_{r}.json"), "w") as f:
        json.dump({"total_time": 123.4, "num_of_streams": 2, "num_of_ops": steps, "op_exe_times": steps * 2, "max_scope_name_num": 0}, f)
    step_ms = [(row[3]) / 100_000 for row in rows[:-1]]
    summary = {"rank_id": r, "framework": framework, "device_target": "CPU", "steps_profiled": steps, "steps_total": steps + 5,
               "step_range": [1, steps], "step_time_ms": {"mean": sum(step_ms) / steps, "p50": sorted(step_ms)[steps // 2],
                                                          "p90": sorted(step_ms)[int(steps * 0.9)], "max": max(step_ms)},
               "stages_ms": {"iteration_interval": avg["interval"] / 1e5, "fp_and_bp": avg["fpbp"] / 1e5, "tail": avg["tail"] / 1e5},
               "stage_share": {"iteration_interval": 0.05, "fp_and_bp": 0.9, "tail": 0.05},
               "data_wait_ms": {"mean": 0.8, "p50": 0.75, "max": 1.25},
               "top_op_types": [{"op_type": t[0], "total_ms": t[3], "percent": t[5]} for t in type_rows],
               "flops": {"mflops_per_step": 61.7, "gflops_per_s": 6.78}, "memory": {"peak_rss_mb": 812.5, "peak_allocated_mb": 301.25},
               "cpu": {"machine_busy_mean": 0.5, "process_user_mean": 0.345, "process_sys_mean": 0.03}, "verdict": "data-bound",
               "suggestions": [{"id": "data_queue_empty", "text": "Queue empty in 25% of steps " + EVIL_SCRIPT,
                                "evidence": {"empty_ratio": 0.25, EVIL: 1, "threshold": 0.3}}],
               "timeline": {"file": f"cpu_timeline_display_{r}.json", "events": len(events), "truncated": False, "dropped": None},
               "host": "node0", "rank_size": rank_size, "communication": {"steps": steps, "mean_ms": 0.25},
               "per_step_ms": {"step": [row[0] for row in rows[:-1]], "total": step_ms, "communication": [0.25] * steps},
               "notes": ["note with " + EVIL], "not_applicable": ["AI Core metrics: CPU run"],
               "python_hot_spots": [{"function": "metric (train.py)", "self_ms": 40.0, "total_ms": 45.0, "self_ms_per_step": 2.0, "steps": [3, steps]},
                                    {"function": EVIL, "self_ms": 90.0, "total_ms": 95.0, "self_ms_per_step": 45.0, "steps": [1, 2]}]}
    if warmup is not None:
        summary["warmup_steps"] = warmup
    with open(p(f"summary_{r}.json"), "w") as f:
        json.dump(summary, f)
    return profiler_dir


# ---- a live server on a free port -------------------------------------------------------------------

class Live:
    def __init__(self, base):
        from msprof_agent.viewer.server import make_server

        self.server = make_server(str(base), "127.0.0.1", 0, quiet=True)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)  # quick shutdown
        self.thread.start()

    def get(self, path, raw=False):
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as resp:
                body = resp.read()
                return resp.status, resp.headers, body if raw else body.decode("utf-8")
        except urllib.error.HTTPError as exc:
            body = exc.read()
            return exc.code, exc.headers, body if raw else body.decode("utf-8")

    def api(self, page, run, rank):
        status, _, body = self.get(f"/api/page/{page}?" + urllib.parse.urlencode({"run": run, "rank": rank}))
        assert status == 200, body
        return json.loads(body)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def base(tmp_path):
    root = tmp_path / "summary"
    make_fixture(str(root / "job_a" / "profiler"), rank=0, steps=20)
    make_fixture(str(root / "cluster" / "rank_0" / "profiler"), rank=0, steps=12, rank_size=2)
    make_fixture(str(root / "cluster" / "rank_1" / "profiler"), rank=1, steps=12, rank_size=2, slow=2.0)
    cluster.write_when_complete(str(root / "cluster" / "rank_1" / "profiler"), 2)  # the job's roll-up, as rank 1's exit writes it
    return root


@contextlib.contextmanager
def served(root):
    """A live viewer over ROOT for the requests of a with-block, shut down after them."""
    server = Live(root)
    try:
        yield server
    finally:
        server.close()


def fixture_run(tmp_path, job, **fixture):
    """One run's fixture files in ``tmp_path/s/JOB/profiler``: (the summary base, the profiler dir)."""
    root = tmp_path / "s"
    make_fixture(str(root / job / "profiler"), **fixture)
    return root, root / job / "profiler"


@pytest.fixture
def live(base):
    with served(base) as server:
        yield server


@pytest.mark.unit
def test_lists_runs_at_any_depth_and_new_ones_without_restart(live, base):
    status, _, body = live.get("/api/runs")
    assert status == 200
    assert json.loads(body) == [{"run": "cluster", "ranks": [0, 1]}, {"run": "job_a", "ranks": [0]}]
    make_fixture(str(base / "deep" / "er" / "job_b" / "profiler"), rank=3)
    runs = {r["run"]: r["ranks"] for r in json.loads(live.get("/api/runs")[2])}
    assert runs["deep/er/job_b"] == [3]
    status, _, page = live.get("/")
    assert status == 200 and "deep/er/job_b" in page


@pytest.mark.unit
def test_overview_numbers_match_files(live, base):
    d = base / "job_a" / "profiler"
    page = live.api("overview", "job_a", 0)
    rows = read_csv(str(d / "step_trace_raw_0_detail_time.csv"))
    assert rows[-1][0] == "-"
    assert page["step_trace"]["data"]["average"]["fp_and_bp"] == pytest.approx(float(rows[-1][7]) / 1e5)
    assert len(page["step_trace"]["data"]["steps"]) == 20
    assert page["summary"]["data"] == read_json(str(d / "summary_0.json"))
    types = read_csv(str(d / "cpu_op_type_info_0.csv"))[1:]
    assert [t["op_type"] for t in page["op_types"]["data"]] == [t[0] for t in sorted(types, key=lambda t: -float(t[3]))]
    assert page["queue"]["data"]["stats"]["empty_ratio"] == pytest.approx(5 / 20)
    assert page["timeline"]["data"]["num_of_ops"] == 20
    status, _, html = live.get("/run/overview?run=job_a&rank=0")
    assert status == 200
    avg = page["step_trace"]["data"]["average"]
    assert f'id="ov-step-fp_and_bp">{avg["fp_and_bp"]:.3f}<' in html
    assert "25.0%" in html  # empty-queue ratio shown
    assert "data-bound" in html


@pytest.mark.unit
def test_every_page_renders_for_every_rank(live):
    for run, ranks in (("job_a", [0]), ("cluster", [0, 1])):
        for rank in ranks:
            for page in ("overview", "steps", "operators", "data", "resources", "cluster"):
                status, headers, body = live.get(f"/run/{page}?run={run}&rank={rank}")
                assert status == 200, (page, body[:500])
                assert "Cannot read" not in body and "not collected" not in body, (page, run)
                assert "default-src 'none'" in headers["Content-Security-Policy"]


@pytest.mark.unit
def test_operators_flops_and_pipeline_and_resources(live, base):
    ops = live.api("operators", "job_a", 0)
    assert ops["flops"]["data"]["Default/network/MatMul-op1"] == [200.0, 3.0, 10.0, 0.25]
    assert ops["flops_summary"]["data"]["FLOPs"] == 1234.5
    html = live.get("/run/operators?run=job_a&rank=0")[2]
    assert "MFLOPs (cube)" in html and 'data-v="200.0"' in html
    dp = live.api("data", "job_a", 0)
    # Batch is the last op and its input (Map's output queue) is full: the MindSpore Profiler guide's rule marks it.
    assert [b["op_id"] for b in dp["pipeline"]["data"]["bottlenecks"]] == [0]
    assert 'class="op bottleneck" data-op-id="0"' in live.get("/run/data?run=job_a&rank=0")[2]
    res = live.api("resources", "job_a", 0)
    assert res["memory_details"]["data"][0]["peak"] == 1250.0
    html = live.get("/run/resources?run=job_a&rank=0")[2]
    assert 'id="mem-peak">1250.000<' in html and 'id="cpu-user">44.5<' in html and 'id="mem-rss">812.500<' in html


@pytest.mark.unit
def test_cluster_marks_the_slow_rank(live, base):
    cluster = live.api("cluster", "cluster", 0)["cluster_summary"]
    assert cluster["file"] == "cluster_summary.json" and os.path.isfile(base / "cluster" / "cluster_summary.json")
    assert cluster["data"]["slow_ranks"] == [1]
    html = live.get("/run/cluster?run=cluster&rank=0")[2]
    assert "rank 1 (slow)" in html and 'data-col="slow" data-v="slow rank"' in html
    spec = charts_of(html)["cl-heat-step_ms"]
    heatmap = spec["data"][0]
    assert heatmap["type"] == "heatmap" and heatmap["y"] == ["rank 0", "rank 1 (slow)"] and len(heatmap["z"][1]) == 12
    [tick], [note] = spec["layout"]["shapes"], spec["layout"]["annotations"]  # rank 1's row, marked and named
    assert (tick["y0"], tick["y1"], note["y"], note["text"]) == (0.5, 1.5, 1, "slow rank 1")
    assert '<td data-col="rank_id" data-v="1.0"><a href="/run/overview?run=cluster&amp;rank=1">1</a>' in html


@pytest.mark.unit
def test_missing_files_say_not_collected(tmp_path):
    root, d = fixture_run(tmp_path, "job")
    for name in os.listdir(d):
        if not name.startswith(("profiler_info", "summary")):
            os.remove(d / name)
    with served(root) as server:
        for page in ("overview", "steps", "operators", "data", "resources", "cluster"):
            status, _, body = server.get(f"/run/{page}?run=job&rank=0")
            assert status == 200 and "not collected" in body, page


@pytest.mark.unit
def test_malformed_and_half_written_files_show_errors_and_server_survives(live, base):
    d = base / "job_a" / "profiler"
    with open(d / "step_trace_raw_0_detail_time.csv") as f:
        text = f.read()
    with open(d / "step_trace_raw_0_detail_time.csv", "w") as f:
        f.write(text[: len(text) // 2].rsplit("\n", 1)[0] + "\n")  # cut mid-run: the average row is gone
    with open(d / "summary_0.json", "w") as f:
        f.write('{"rank_id": 0, "framework": "mindsp')
    with open(d / "cpu_op_type_info_0.csv", "wb") as f:
        f.write(b"\xff\xfe\x00garbage")
    with open(d / "minddata_cpu_utilization_0.json", "w") as f:
        f.write("[1, 2")
    for page in ("overview", "steps", "operators", "resources"):
        status, _, body = live.get(f"/run/{page}?run=job_a&rank=0")
        assert status == 200 and 'class="error"' in body, page
    assert "average row" in live.get("/run/steps?run=job_a&rank=0")[2]
    assert live.get("/api/runs")[0] == 200


@pytest.mark.unit
def test_path_escapes_are_refused(live, base, tmp_path):
    secret = tmp_path / "secret"
    make_fixture(str(secret / "profiler"))  # a run outside the base directory
    os.symlink(secret, base / "linked")      # reachable only through a symlink
    os.symlink("/etc/passwd", base / "job_a" / "profiler" / "summary_9.json")
    runs = [r["run"] for r in json.loads(live.get("/api/runs")[2])]
    assert "linked" not in runs
    for path in ("/run/overview?run=..&rank=0", "/run/overview?run=../secret&rank=0", "/run/overview?run=%2e%2e%2fsecret&rank=0",
                 "/run/overview?run=linked&rank=0", "/run/overview?run=%2Fetc&rank=0", "/run/overview?run=job_a/../..&rank=0",
                 "/static/../../../../etc/passwd", "/static/%2e%2e/%2e%2e/etc/passwd", "/static/..%2fserver.py",
                 "/../../etc/passwd", "/timeline?run=../secret", "/run/..%2f..%2fetc?run=job_a",
                 "/run/overview?run=job_a&rank=0/../../etc", "/run/overview?run=job_a&rank=9"):
        status, _, body = live.get(path)
        assert status in (400, 404), path
        assert "root:" not in body
    with open(base / "job_a" / "profiler" / "profiler_info_9.json", "w") as f:
        f.write("{}")  # rank 9 now exists, but its summary is a link to /etc/passwd
    status, _, body = live.get("/run/overview?run=job_a&rank=9")
    assert status == 200 and "root:" not in body and "refused" in body
    status, _, _ = live.get("/run/overview?run=job_a&rank=0")
    assert status == 200


@pytest.mark.unit
def test_writes_are_refused(live):
    req = urllib.request.Request(live.url + "/run/overview?run=job_a&rank=0", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 405


@pytest.mark.unit
def test_run_folder_names_are_escaped(live, base):
    make_fixture(str(base / EVIL / "profiler"))
    status, _, body = live.get("/")
    assert status == 200 and "<img" not in body and "&lt;img src=x onerror=alert(1)&gt;" in body
    status, _, body = live.get("/run/overview?" + urllib.parse.urlencode({"run": EVIL, "rank": 0}))
    assert status == 200 and "<img" not in body


@pytest.mark.unit
def test_profile_names_are_escaped_everywhere(live):
    for page in ("overview", "steps", "operators", "data", "resources", "cluster"):
        body = live.get(f"/run/{page}?run=job_a&rank=0")[2]
        assert "<img" not in body, page
        assert "<script>alert" not in body and "</script><script>" not in body, page
    overview = live.get("/run/overview?run=job_a&rank=0")[2]
    assert "&lt;img src=x onerror=alert(1)&gt;" in overview
    assert "&lt;/script&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in overview  # suggestion text
    ops = live.get("/run/operators?run=job_a&rank=0")[2]
    assert ops.count("&lt;img src=x onerror=alert(1)&gt;") >= 2


@pytest.mark.unit
def test_timeline_download_filters(live, base):
    status, headers, body = live.get("/timeline?run=cluster&ranks=0&ranks=1&kind=detail")
    assert status == 200 and "attachment" in headers["Content-Disposition"]
    events = json.loads(body)
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names == {"Rank 0: Step Trace", "Rank 0: CPU ops", "Rank 1: Step Trace", "Rank 1: CPU ops"}
    assert len({e["pid"] for e in events}) == 4 and 0 not in {e["pid"] for e in events}
    assert sum(1 for e in events if e.get("ph") == "X") == 2 * 2 * 12
    summary = json.loads(live.get("/timeline?run=cluster&ranks=1&kind=summary")[2])
    processes = {e["args"]["name"]: e["pid"] for e in summary if e.get("name") == "process_name"}
    assert processes == {"Rank 0: Step Trace": 1, "Rank 1: Step Trace": 2}  # rank 0: its lanes, built from its step trace
    own = [e for e in summary if e.get("pid") == 2]
    assert sum(1 for e in own if e.get("ph") == "X") == 12
    assert len({e["tid"] for e in own if e.get("ph") == "X"}) == 2
    lanes = [e for e in summary if e.get("pid") == 1]
    assert [e["name"] for e in lanes if e.get("ph") == "X" and e["tid"] == 1] == [f"Step {n}" for n in range(1, 13)]
    assert {e["name"] for e in lanes if e.get("ph") == "X" and e["tid"] == 2} == {"Step Interval", "Forward+Backward", "Tail"}
    merged = json.loads(live.get("/timeline?run=cluster&ranks=1&kind=summary&merge=1")[2])
    assert len({e["tid"] for e in merged if e.get("ph") == "X" and e["pid"] == 2}) == 1
    assert sum(1 for e in merged if e.get("name") == "thread_name" and e["pid"] == 2) == 1
    assert live.get("/timeline?run=cluster&ranks=5")[0] == 404
    assert live.get("/timeline?run=cluster&kind=bogus")[0] == 400


@pytest.mark.unit
def test_the_cluster_page_offers_the_download_of_every_rank_with_the_slow_ones_detail(live):
    from msprof_agent.viewer.merged_timeline import BUDGET_BYTES, DOWNLOAD_INFO

    page = live.get("/run/cluster?run=cluster&rank=0")[2]
    assert 'id="cluster-timeline-download"' in page and 'name="ranks" value="0,1"' in page  # rank 1 is the slow one
    status, headers, body = live.get("/timeline?run=cluster")
    assert status == 200 and headers["Content-Disposition"] == 'attachment; filename="timeline_detail_0-1.json"'
    events = json.loads(body)
    assert len(body.encode()) <= BUDGET_BYTES
    assert {e["args"]["name"] for e in events if e.get("name") == "process_name"} == {"Rank 0: Step Trace", "Rank 0: CPU ops",
                                                                                      "Rank 1: Step Trace", "Rank 1: CPU ops"}
    one = json.loads(live.get("/timeline?run=cluster&ranks=1,")[2])  # the comma form; rank 0 keeps its lanes
    assert {e["args"]["name"] for e in one if e.get("name") == "process_name"} == {"Rank 0: Step Trace", "Rank 1: Step Trace", "Rank 1: CPU ops"}
    [info] = [e["args"] for e in one if e.get("name") == DOWNLOAD_INFO]
    assert info["op_detail_ranks"] == [1] and info["lanes"] == {"ranks": 1, "every": 1, "steps": "every step"} and info["budget_bytes"] == BUDGET_BYTES
    assert live.get("/timeline?run=cluster&ranks=0,x")[0] == 400


@pytest.mark.unit
def test_static_plotly_is_served_from_the_package(live):
    status, headers, body = live.get("/static/plotly.min.js", raw=True)
    assert status == 200 and b"plotly.js" in body[:200] and "javascript" in headers["Content-Type"]


@pytest.mark.unit
def test_report_is_an_offline_file_with_plotly_beside_it(tmp_path):
    from msprof_agent.viewer import write_report

    d = make_fixture(str(tmp_path / "run" / "profiler"), rank=0)
    path = write_report(d, 0)
    assert os.path.basename(path) == "report_0.html"
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert re.findall(r"<script src=[^>]*>", text) == ['<script src="plotly.min.js">'] and "<link" not in text and "@import" not in text
    assert "Plotly" in text and "msprof-charts" in text
    assert "<img" not in text.split("<script>", 1)[0]
    for title in ("Overview", "Step trace", "Operators", "Data preparation", "Resources"):
        assert f">{title}</h1>" in text
    assert ">Cluster</h1>" not in text  # one rank: nothing to compare
    assert 'href="cpu_timeline_display_0.json"' in text
    assert "st-timeline" in charts_of(text) and "st-steps" in charts_of(text)


def charts_of(html):
    """The plotly specs a page hands to viewer.js, keyed by chart id."""
    blob = html.split('<script type="application/json" id="msprof-charts">', 1)[1].split("</script>", 1)[0]
    return json.loads(blob)


MINDSPORE_ONLY = ("ms_version", "context_mode", "MindSpore version", "hccl", "subgraph", "MindInsight", "pynative", "not found")


@pytest.mark.unit
def test_torch_pages_speak_torch_and_name_the_options(tmp_path):
    """A torch run (no pipeline, one rank, no memory files) shows its torch version and eager mode, no MindSpore
    word, and each empty section says in one sentence what fills it (or why torch has none)."""
    root, d = fixture_run(tmp_path, "torch_job", framework="torch")
    for name in ("minddata_pipeline_raw_0.csv", "hccl_raw_0.csv", "memory_usage_summary_0.json", "memory_usage_details_0.json"):
        os.remove(d / name)
    with served(root) as server:
        for page in ("overview", "steps", "operators", "data", "resources", "cluster"):
            body = server.get(f"/run/{page}?run=torch_job&rank=0")[2]
            assert [w for w in MINDSPORE_ONLY if w in body] == [], page
        overview = server.get("/run/overview?run=torch_job&rank=0")[2]
        assert 'data-key="torch version">2.13.0+cpu<' in overview and 'data-key="mode">eager<' in overview
        assert "PyTorch DataLoader has none" in server.get("/run/data?run=torch_job&rank=0")[2]
        assert "profile_memory: true" in server.get("/run/resources?run=torch_job&rank=0")[2]
        assert "profile_communication: true" in server.get("/run/cluster?run=torch_job&rank=0")[2]
        with open(d / "step_trace_raw_0_detail_time.csv", "w") as f:  # no step profiled: a header only
            f.write("step_num,start_point,end_point,total,fp_point,bp_point,iteration_interval,fp_and_bp,tail\n")
        for page in ("overview", "steps"):
            body = server.get(f"/run/{page}?run=torch_job&rank=0")[2]
            assert "No step was profiled: check start_step / stop_step" in body and "st-steps" not in charts_of(body), page


@pytest.mark.unit
def test_mindspore_empty_sections_name_their_option_and_draw_no_empty_chart(tmp_path):
    root, d = fixture_run(tmp_path, "ms_job")
    os.remove(d / "minddata_pipeline_raw_0.csv")
    with open(d / "dataset_iterator_profiling_0.txt", "w") as f:  # waits, no queue records
        f.write("0 0 1 0.5 1700000000001\n")
    with served(root) as server:
        body = server.get("/run/data?run=ms_job&rank=0")[2]
        assert "data_process: true" in body and "not found" not in body
        assert list(charts_of(body)) == ["dp-fetch"]
        overview = server.get("/run/overview?run=ms_job&rank=0")[2]
        assert 'data-key="MindSpore version">2.10.0<' in overview and 'data-key="mode">graph<' in overview
        assert "merge multiple subgraphs" in overview


@pytest.mark.unit
def test_one_sample_draws_no_empty_axes(tmp_path):
    root, d = fixture_run(tmp_path, "short")
    cpu = read_json(str(d / "minddata_cpu_utilization_0.json"))
    cpu["time_stamp"] = cpu["time_stamp"][:1]
    with open(d / "minddata_cpu_utilization_0.json", "w") as f:
        json.dump(cpu, f)
    with open(d / "memory_usage_details_0.json", "w") as f:
        json.dump({"0": {"graph_id": 0, "lines": [512.0]}}, f)
    with served(root) as server:
        body = server.get("/run/resources?run=short&rank=0")[2]
        assert charts_of(body) == {} and "One sample only: the run was shorter than cpu_sampling_interval (1000 ms)" in body
        assert 'id="mem-peak">512.000<' in body


@pytest.mark.unit
def test_steps_page_stacks_each_step_and_marks_warmup(tmp_path):
    from msprof_agent.viewer.pages import steps as steps_page

    root = tmp_path / "s"
    make_fixture(str(root / "warm" / "profiler"), steps=12, warmup=3)
    make_fixture(str(root / "cold" / "profiler"), steps=12)
    with served(root) as server:
        warm = server.get("/run/steps?run=warm&rank=0")[2]
        spec = charts_of(warm)["st-steps"]
        traces = {t["name"]: t for t in spec["data"]}
        assert list(traces) == ["Data wait", "Step interval (other)", "Forward + backward", "Step tail", "Communication (within the step)"]
        steps = server.api("steps", "warm", 0)["step_trace"]["data"]["steps"]
        assert traces["Data wait"]["x"] == [s["step"] for s in steps]
        for i, step in enumerate(steps):  # the fixture waits 0.5 + (n % 4) * 0.25 ms, inside its interval
            assert traces["Data wait"]["y"][i] == pytest.approx(min(0.5 + (step["step"] % 4) * 0.25, step["iteration_interval"]))
            assert traces["Data wait"]["y"][i] + traces["Step interval (other)"]["y"][i] == pytest.approx(step["iteration_interval"])
        assert traces["Communication (within the step)"]["y"] == [pytest.approx(0.2)] * 12
        assert [(band["x0"], band["x1"]) for band in spec["layout"]["shapes"]] == [(0.5, 1.5), (1.5, 2.5), (2.5, 3.5)]
        assert "Warm-up (shaded): step 1, 2, 3;" in warm
        assert steps_page.warmup_steps({"warmup_steps": [{"step": 2, "ms": 9.0}, {"step": 1, "ms": 30.0}]}, [1, 2, 3]) == [1, 2]
        assert steps_page.warmup_steps({"warmup_steps": [1]}, [1, 2]) == [1] and steps_page.warmup_steps({}, [1, 2]) == []
        cold = server.get("/run/steps?run=cold&rank=0")[2]
        assert "shapes" not in charts_of(cold)["st-steps"]["layout"] and "warm-up" not in cold
        timeline = charts_of(warm)["st-timeline"]
        bars = [(y, base, x) for t in timeline["data"] for y, base, x in zip(t["y"], t["base"], t["x"])]
        assert len(bars) == 12 and {t["name"] for t in timeline["data"]} == {"Step"}
        assert min(b[1] for b in bars) == 0.0


@pytest.mark.unit
def test_drawn_timeline_is_capped(tmp_path, monkeypatch):
    from msprof_agent.viewer import merged_timeline, report, sections

    d = make_fixture(str(tmp_path / "capped" / "profiler"), steps=30)
    monkeypatch.setattr(merged_timeline, "TIMELINE_DRAW_MAX_EVENTS", 7)
    run = sections.Run("capped", {0: d})
    timeline = merged_timeline.step_timeline(run, [0])
    assert len(timeline["events"]) == 7 and timeline["left_out"] == 23
    with open(report.write_report(d, 0), encoding="utf-8") as f:
        text = f.read()
    assert sum(len(t["x"]) for t in charts_of(text)["st-timeline"]["data"]) == 7 and "23 more left out" in text
    monkeypatch.setattr(merged_timeline, "TIMELINE_DRAW_MAX_BYTES", 100)
    timeline = merged_timeline.step_timeline(run, [0])
    assert timeline["events"] == [] and "download it" in timeline["problems"][0]


@pytest.mark.unit
def test_cluster_timeline_has_every_rank(live):
    spec = charts_of(live.get("/run/cluster?run=cluster&rank=0")[2])["cl-timeline"]
    rows = {y for t in spec["data"] for y in t["y"]}
    assert {y.split(" · ")[0] for y in rows} == {"rank 0", "rank 1"}
    order = [y.split(" · ")[0] for y in spec["layout"]["yaxis"]["categoryarray"]]
    assert order == sorted(order) and set(spec["layout"]["yaxis"]["categoryarray"]) == rows  # rank 0's tracks, then rank 1's


@pytest.mark.unit
def test_operators_by_shape_with_self_and_total(live, base):
    body = live.get("/run/operators?run=job_a&rank=0")[2]
    shapes = read_csv(str(base / "job_a" / "profiler" / "cpu_op_shape_info_0.csv"))[1:]
    assert body.count('<td data-col="input_shape"') == len(shapes) == 10
    conv_total = sum(float(r[5]) for r in shapes if r[0] == "Conv2D")
    assert f'<td data-col="incl_ms" data-v="{conv_total!r}">' in body
    ops = live.api("operators", "job_a", 0)["op_shapes"]["data"]
    assert all(r["total_ms"] >= r["self_ms"] for r in ops)


@pytest.mark.unit
def test_index_shows_each_runs_numbers(live, base):
    body = live.get("/")[2]
    summary = read_json(str(base / "job_a" / "profiler" / "summary_0.json"))
    row = body.split('<tr data-run="job_a">', 1)[1].split("</tr>", 1)[0]
    for col, text in (("framework", "mindspore"), ("ranks", "1"), ("steps", "20"), ("p50", f"{summary['step_time_ms']['p50']:.3f}"),
                      ("verdict", "data-bound")):
        assert f'data-col="{col}"' in row and f">{text}</td>" in row, col
    assert 'class="data sortable" id="runs"' in body


@pytest.mark.unit
def test_a_rank_report_leaves_the_cluster_to_the_viewer(tmp_path):
    """A report carries its rank's pages, not the cluster's: the same size whatever the number of ranks."""
    from msprof_agent.viewer import write_report

    d = str(tmp_path / "multi" / "profiler")
    make_fixture(d, rank=0, rank_size=2)
    make_fixture(d, rank=1, rank_size=2, slow=1.5)
    with open(write_report(d, 1), encoding="utf-8") as f:
        text = f.read()
    for title in ("Overview", "Step trace", "Operators", "Data preparation", "Resources"):
        assert f">{title}</h1>" in text
    assert ">Cluster</h1>" not in text and '<a href="cluster_report.html" id="cluster-link">' in text  # a link to the job's page


@pytest.mark.unit
def test_report_without_plotly_is_skipped_with_what_to_install(tmp_path, monkeypatch):
    from msprof_agent.viewer import ViewerExtraMissing, report, write_report

    monkeypatch.setattr(report, "plotly_js_path", lambda: None)
    d = make_fixture(str(tmp_path / "p"), rank=2)
    with pytest.raises(ViewerExtraMissing, match=r"plotly is not installed \(pip install 'msprof-agent\[viewer\]'\)"):
        write_report(d, 2)
    assert not os.path.exists(os.path.join(d, "report_2.html"))


@pytest.mark.unit
def test_cli_view_binds_loopback_and_warns_otherwise(base):
    for host, warned in (("127.0.0.1", False), ("0.0.0.0", True)):
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "msprof_agent", "view", "--summary-base-dir", str(base), "--host", host,
                                 "--port", str(port)], stderr=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            lines = []
            deadline = time.time() + 30
            while time.time() < deadline:
                line = proc.stderr.readline()
                lines.append(line)
                if "serving" in line or not line:
                    break
            text = "".join(lines)
            assert "serving" in text, text
            assert ("WARNING" in text) == warned, text
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=10) as resp:
                assert resp.status == 200
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@pytest.mark.unit
def test_cli_view_refuses_a_missing_directory(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "msprof_agent", "view", "--summary-base-dir", str(tmp_path / "nope"), "--port", "0"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2 and "not a directory" in proc.stderr


@pytest.mark.unit
def test_cli_view_without_jinja2_says_what_to_install(base):
    code = "import sys; sys.modules['jinja2'] = None; from msprof_agent.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", code, "view", "--summary-base-dir", str(base), "--port", "0"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2 and "jinja2 is not installed" in proc.stderr and "msprof-agent[viewer]" in proc.stderr, proc.stderr


# ---- real profiled runs -----------------------------------------------------------------------------

def _analysis_ready():
    try:
        from msprof_agent import analysis  # noqa: F401
    except ImportError as exc:
        return f"msprof_agent.analysis is not there yet ({exc})"
    return None


def _check_real_run(base, run, rank):
    """Every page of a real run renders; the numbers the API shows are the numbers in the files."""
    server = Live(base)
    try:
        directory = run.ranks[rank]
        summary = read_json(os.path.join(directory, f"summary_{rank}.json"))
        overview = server.api("overview", run.id, rank)
        assert overview["summary"]["data"] == summary
        st = overview["step_trace"]
        if st["status"] == "ok":
            rows = read_csv(os.path.join(directory, f"step_trace_raw_{rank}_detail_time.csv"))
            assert st["data"]["average"]["total"] == pytest.approx(float(rows[-1][3]) / 1e5)
            assert len(st["data"]["steps"]) == len(rows) - 2
        else:
            assert st["status"] == "missing"
        bodies = {}
        for page in ("overview", "steps", "operators", "data", "resources", "cluster"):
            status, _, body = server.get(f"/run/{page}?" + urllib.parse.urlencode({"run": run.id, "rank": rank}))
            assert status == 200 and 'class="error"' not in body, (page, body[:2000])
            bodies[page] = body
        shapes = read_csv(os.path.join(directory, f"cpu_op_shape_info_{rank}.csv"))
        assert shapes[0] == ["op_type", "op_name", "input_shape", "op_occurrences", "self_time(ms)", "total_time(ms)"]
        assert all(float(r[5]) >= float(r[4]) - 1e-6 for r in shapes[1:])
        detail = read_csv(os.path.join(directory, f"cpu_op_detail_info_{rank}.csv"))[1:]
        assert sum(float(r[4]) for r in shapes[1:]) == pytest.approx(sum(float(r[5]) for r in detail), rel=1e-4)  # self times agree
        if summary["framework"] == "torch":  # nested ops: some op's total holds more than its own time
            assert any(float(r[5]) > float(r[4]) * 1.5 for r in shapes[1:])
        status, _, body = server.get("/timeline?" + urllib.parse.urlencode({"run": run.id, "kind": "detail"}))
        assert status == 200 and isinstance(json.loads(body), list)
        report = os.path.join(directory, f"report_{rank}.html")
        if not os.path.isfile(report):
            from msprof_agent.viewer import write_report

            report = write_report(directory, rank)
        assert os.path.getsize(report) > 0
        with open(report, encoding="utf-8") as handle:
            _figures_agree(summary, [bodies["resources"], bodies["operators"], handle.read()])
    finally:
        server.close()


def _figures_agree(summary, pages):
    """The CPU means and MFU each page shows are the summary's (to the digits shown)."""
    cpu, mfu = summary.get("cpu"), (summary.get("flops") or {}).get("mfu")
    assert cpu and mfu, "a real run has CPU samples and an MFU"
    # the default interval adapts to the window, waiting 10 ms at first: torch_cnn's ~50 ms window (10 steps of
    # ~1 ms after a 25 ms first step) gets 4-5 samples, LeNet's 1.7 s ~40 (1 s sampling gave each one or two);
    # fewer when busy shared cores wake the sampler late (measured: 10 ms waits ending after 11-70 ms)
    assert cpu["samples"] >= 3
    shown = lambda html, key: float(re.search(f'id="{key}">([^<]*)<', html).group(1))  # noqa: E731
    for html in pages:
        if 'id="cpu-busy"' in html:
            for key, field in (("cpu-busy", "machine_busy_mean"), ("cpu-user", "machine_user_mean"), ("cpu-puser", "process_user_mean")):
                assert shown(html, key) == pytest.approx(cpu[field], abs=0.051), key
        if 'id="flops-mfu"' in html:
            assert shown(html, "flops-mfu") == pytest.approx(100 * mfu["ratio"], abs=0.00051)
    assert any('id="cpu-busy"' in html for html in pages) and any('id="flops-mfu"' in html for html in pages)


@pytest.mark.parametrize("script", [pytest.param("mindspore_lenet.py", marks=pytest.mark.mindspore),
                                    pytest.param("torch_cnn.py", marks=pytest.mark.torch)])
def test_real_run(script, request, tmp_path):
    from msprof_agent.viewer.sections import scan

    reason = _analysis_ready()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "prof"
    shutil.copytree(request.getfixturevalue("lenet_job" if script.startswith("mindspore") else "cnn_job"), out)
    runs = scan(str(out))
    assert len(runs) == 1
    run = next(iter(runs.values()))
    _check_real_run(str(out), run, min(run.ranks))


@pytest.mark.torch
def test_real_torch_two_ranks(slowed_rank_cnn_job, tmp_path):
    """Two ranks joined in a gloo group; rank 1 sleeps each step, so the cluster page must mark it slowest."""
    from msprof_agent.viewer.sections import scan

    reason = _analysis_ready()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "prof"
    shutil.copytree(slowed_rank_cnn_job, out)  # the viewer may write beside the files it serves
    runs = scan(str(out))
    assert len(runs) == 1, runs
    run = next(iter(runs.values()))
    assert sorted(run.ranks) == [0, 1]
    for rank in run.ranks:
        _check_real_run(str(out), run, rank)
    server = Live(out)
    try:
        cluster = server.api("cluster", run.id, 0)["cluster_summary"]  # written at exit by whichever rank finished last
        assert cluster["data"]["slow_ranks"] == [1] and [r["rank_id"] for r in cluster["data"]["ranks"]] == [0, 1]
        assert "rank 1 (slow)" in server.get("/run/cluster?" + urllib.parse.urlencode({"run": run.id, "rank": 0}))[2]
        events = json.loads(server.get("/timeline?" + urllib.parse.urlencode({"run": run.id, "kind": "summary"}))[2])
        names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
        assert {"Rank 0: Step Trace", "Rank 1: Step Trace"} <= names
        detail = json.loads(server.get("/timeline?" + urllib.parse.urlencode({"run": run.id, "kind": "detail"}))[2])
        assert [e["name"] for e in detail if e["ph"] == "M" and e["name"] == "time_base"] == ["time_base"]  # one base for both ranks
        assert overlapping_slices(detail) == []
    finally:
        server.close()
    assert len(set(run.ranks.values())) == 1, run.ranks  # both ranks in one directory
    written = os.path.join(run.ranks[0], "cluster_summary.json")
    at_exit = read_json(written)
    page = os.path.join(run.ranks[0], "cluster_report.html")  # written with it, by whichever rank finished last
    page_at_exit = open(page, "rb").read()
    assert b"slow rank 1" in page_at_exit
    for rank in run.ranks:
        report = open(os.path.join(run.ranks[rank], f"report_{rank}.html"), encoding="utf-8").read()
        [href] = re.findall(r'<a href="([^"]*)" id="cluster-link">', report)
        assert os.path.samefile(os.path.join(run.ranks[rank], href), page)
    proc = subprocess.run([sys.executable, "-m", "msprof_agent", "analyse", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_json(written) == at_exit  # analyse writes the roll-up the ranks wrote at exit
    assert open(page, "rb").read() == page_at_exit  # and the same page, byte for byte


@pytest.mark.torch
def test_analyse_export_names_its_folders_and_the_index_lists_no_export_as_a_run(tmp_path):
    """``analyse DIR --export text,db`` ends by naming the Ascend layout's folder and HTA's; the runs index keeps one run."""
    from msprof_agent.viewer.sections import scan

    out = tmp_path / "prof"
    assert run_script([os.path.join(SCRIPTS, "tiny_torch.py"), "--steps", "3"], profile_into(str(out))).returncode == 0
    proc = subprocess.run([sys.executable, "-m", "msprof_agent", "analyse", str(out), "--export", "text,db"], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [ascend] = [d for d in os.listdir(out) if d.endswith("_ascend_pt")]
    assert proc.stderr.splitlines()[-2:] == [f"msprof-agent: export written: {out / ascend}", f"msprof-agent: export written: {out / 'hta_trace'}"]
    assert os.path.isfile(out / ascend / "profiler_info_0.json")  # what made the folder look like a run
    assert list(scan(str(tmp_path))) == ["prof"]


FINDINGS = [{"id": "host_work", "category": "host", "severity": "high", "ms_per_step": 50.0, "text": "Host-bound " + EVIL, "action": "move it",
             "evidence": {"host_ms": 50.0, "steps": [[3, 5], [8, 8]], "hot_spots": [{"function": "metric (train.py)", "self_ms_per_step": 2.0}]}},
            {"id": "periodic_pause", "category": "jitter", "severity": "medium", "ms_per_step": 5.0, "text": "Jitter", "action": "gc",
             "evidence": {"period": 4, "steps": [4, 8, 12]}},
            {"id": "memory_growth", "category": "memory", "severity": "high", "ms_per_step": 0.0, "text": "Memory", "action": "free",
             "evidence": {"bytes_per_step": 1}}]


def _with_findings(profiler_dir, rank=0, findings=FINDINGS):
    path = os.path.join(profiler_dir, f"summary_{rank}.json")
    with open(path) as f:
        summary = json.load(f)
    summary["findings"] = findings
    with open(path, "w") as f:
        json.dump(summary, f)


def _links(html, finding_id):
    """The (kind, href) of each link of one finding on a page."""
    item = html.split(f'data-id="{finding_id}"', 1)[1].split("</li>", 1)[0]
    return re.findall(r'<a href="([^"]*)" class="finding-link" data-link="([^"]*)"', item)


@pytest.mark.unit
def test_findings_link_to_their_steps_and_hot_spots_in_viewer_and_report(tmp_path):
    """Each finding resting on steps links to the Step trace page with those steps in the fragment viewer.js reads;
    the host-work finding links to the Python hot spots; in the report the links stay inside the file."""
    from msprof_agent.viewer import write_report

    d = make_fixture(str(tmp_path / "job" / "profiler"), steps=12, warmup=2)
    _with_findings(d)
    server = Live(tmp_path)
    try:
        overview = server.get("/run/overview?run=job&rank=0")[2]
        assert _links(overview, "host_work") == [("/run/steps?run=job&amp;rank=0#steps=3-5,8", "steps"),
                                                 ("/run/steps?run=job&amp;rank=0#python-hot-spots", "hot-spots")]
        assert _links(overview, "periodic_pause") == [("/run/steps?run=job&amp;rank=0#steps=4,8,12", "steps")]
        assert _links(overview, "memory_growth") == []
        assert EVIL not in overview and "Host-bound &lt;img" in overview
        assert len(re.findall(r">Notes<", overview)) == 1 and "note with &lt;img" in overview  # the card's title, no second heading
        steps = server.get("/run/steps?run=job&rank=0")[2]
        assert 'id="step-highlight" hidden' in steps and 'id="python-hot-spots"' in steps
        table = steps.split('id="hot-spots"', 1)[1].split("</table>", 1)[0]
        functions = re.findall(r'<td data-col="function" data-v="([^"]*)"', table)
        assert functions == ["metric (train.py)", EVIL.replace("<", "&lt;").replace(">", "&gt;")]  # the steady range first, then warm-up
        assert re.findall(r'<td data-col="phase" data-v="([^"]*)"', table) == ["steady", "warm-up"]
        assert re.findall(r'<td data-col="range" data-v="([^"]*)"', table) == ["3-12", "1-2"]
    finally:
        server.close()
    with open(write_report(d, 0), encoding="utf-8") as f:
        report = f.read()
    assert _links(report, "host_work") == [("#steps=3-5,8", "steps"), ("#python-hot-spots", "hot-spots")]
    assert 'id="python-hot-spots"' in report and 'id="step-highlight"' in report


@pytest.mark.unit
def test_hot_spots_not_collected_name_the_option(tmp_path):
    d = make_fixture(str(tmp_path / "job" / "profiler"), framework="torch")
    path = os.path.join(d, "summary_0.json")
    with open(path) as f:
        summary = json.load(f)
    summary["python_hot_spots"] = []
    with open(path, "w") as f:
        json.dump(summary, f)
    server = Live(tmp_path)
    try:
        steps = server.get("/run/steps?run=job&rank=0")[2]
        assert 'id="hot-spots"' not in steps
        assert "not collected: Set with_stack: true (or profile_framework: &#34;time&#34;) to sample" in steps
    finally:
        server.close()


@pytest.mark.unit
def test_cluster_page_shows_the_cluster_findings(tmp_path):
    """cluster_summary.json's findings (the straggler) head the cluster page, linking to the slow rank's step trace."""
    d = str(tmp_path / "multi" / "profiler")
    make_fixture(d, rank=0, rank_size=2)
    make_fixture(d, rank=1, rank_size=2, slow=1.5)
    straggler = {"id": "straggler", "category": "straggler", "severity": "high", "ms_per_step": 4.2, "text": "Straggler: rank 1 " + EVIL,
                 "action": "look at rank 1", "evidence": {"rank": 1, "extra_ms": 4.2}}
    with open(os.path.join(d, "cluster_summary.json"), "w") as f:
        json.dump({"rank_size": 2, "ranks": [], "slow_ranks": [1], "findings": [straggler]}, f)
    server = Live(tmp_path)
    try:
        cluster = server.get("/run/cluster?run=multi&rank=0")[2]
        assert "Straggler: rank 1 &lt;img" in cluster and EVIL not in cluster
        assert _links(cluster, "straggler") == [("/run/steps?run=multi&amp;rank=1", "rank")]
    finally:
        server.close()


@pytest.mark.torch
def test_injected_slow_function_heads_the_hot_spots_of_viewer_and_report(tmp_path):
    """A real torch run with with_stack and 60 ms of Python work per step (the advisor's host-work scenario):
    the injected function is the first row of the Python hot-spots table on the Step trace page and in the
    report, and the host-work finding links to that table."""
    out = str(tmp_path / "host")
    proc = run_script([os.path.join(SCRIPTS, "advisor_torch.py"), "--loop-ms", "60"], profile_into(out, with_stack=True), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    injected = f"host_work_in_loop (injected_causes.py:{injected_line('host_work_in_loop')})"
    server = Live(tmp_path)
    try:
        steps = server.get("/run/steps?run=host&rank=0")[2]
        overview = server.get("/run/overview?run=host&rank=0")[2]
    finally:
        server.close()
    with open(os.path.join(out, "profiler", "report_0.html"), encoding="utf-8") as f:
        report = f.read()
    for page in (steps, report):
        table = page.split('id="hot-spots"', 1)[1].split("</table>", 1)[0]
        assert re.findall(r'<td data-col="function" data-v="([^"]*)"', table)[0] == injected
    assert ("/run/steps?run=host&amp;rank=0#python-hot-spots", "hot-spots") in _links(overview, "host_work")
    assert ("#python-hot-spots", "hot-spots") in _links(report, "host_work")


@pytest.mark.unit
def test_the_overview_and_the_step_trace_show_one_step_time(tmp_path):
    """One definition of the run's step on every page: the steady steps' mean (warm-up left out), the summary's,
    not the step trace file's average over every step (a new user read 9.99 ms on one page, 11.205 on the other)."""
    profiler = root = tmp_path / "s"
    profiler = root / "warm" / "profiler"
    make_fixture(str(profiler), steps=12, warmup=[{"step": n, "ms": 5.0} for n in (1, 2, 3)])
    csv_path = str(profiler / "step_trace_raw_0_detail_time.csv")
    header, *rows = read_csv(csv_path)
    for row in rows[:3]:  # the warm-up steps 5 ms longer, in their interval
        row[2], row[3], row[6] = int(row[2]) + 500_000, int(row[3]) + 500_000, int(row[6]) + 500_000
    columns = [[int(row[i]) for row in rows[:-1]] for i in (6, 7, 8)]
    rows[-1] = ["-", "", "", sum(map(sum, columns)) / len(columns[0]), "", "", *(sum(c) / len(c) for c in columns)]
    with open(csv_path, "w", newline="") as handle:
        csv.writer(handle).writerows([header, *rows])
    steady = [[int(v) / 1e5 for v in row[6:9]] for row in rows[3:-1]]  # steps 4..12: interval, fp_and_bp, tail (10 ns units)
    summary = read_json(str(profiler / "summary_0.json"))
    summary["stages_ms"] = dict(zip(("iteration_interval", "fp_and_bp", "tail"), (sum(c) / len(steady) for c in zip(*steady))))
    summary["step_time_ms"]["mean"] = mean = sum(map(sum, steady)) / len(steady)
    (profiler / "summary_0.json").write_text(json.dumps(summary))
    with served(root) as server:
        shown = [re.search(rf'id="{span}total">([^<]*)<', server.get(f"/run/{page}?run=warm&rank=0")[2]).group(1)
                 for page, span in (("overview", "ov-step-"), ("steps", "st-"))]
    assert shown == [f"{mean:.3f}"] * 2 and float(rows[-1][3]) / 1e5 != pytest.approx(mean, abs=1e-3), (shown, rows[-1])


@pytest.mark.unit
def test_a_one_rank_torch_run_shows_no_cluster_tab_and_no_mindspore_memory_counters(tmp_path):
    """A new user's PyTorch run: no Cluster tab with one rank, the memory curve named by what measured it (not
    MindSpore's 'graph 0'), and no allocation counters or static memory, MindInsight's graph-memory fields; every
    chart's title at the left, clear of plotly's toolbar at the top right."""
    profiler = tmp_path / "s" / "job" / "profiler"
    make_fixture(str(profiler), framework="torch")
    memory = read_json(str(profiler / "memory_usage_summary_0.json"))
    (profiler / "memory_usage_summary_0.json").write_text(json.dumps(dict(memory, source="process RSS")))
    with served(tmp_path / "s") as server:
        page = server.get("/run/resources?run=job&rank=0")[2]
        overview = server.get("/run/overview?run=job&rank=0")[2]
    assert 'data-page="cluster"' not in page and 'data-page="resources"' in page
    assert [t["name"] for t in charts_of(page)["mem-lines"]["data"] if "name" in t] == ["process RSS"]
    assert 'data-mem="allocations"' not in page and 'data-mem="static_mem"' not in page and 'data-mem="peak_mem"' in page
    for chart in list(charts_of(page).values()) + list(charts_of(overview).values()):
        title = chart["layout"].get("title")
        assert not title or (title["x"], title["xanchor"]) == (0, "left"), title


@pytest.mark.unit
def test_a_report_loads_plotly_from_beside_it(tmp_path):
    """plotly.min.js (4.8 MB) inlined was nearly all of a report of 80 tiny steps, and again in each rank's: one copy a
    folder, beside the reports, which load it."""
    from msprof_agent.viewer import write_report
    from msprof_agent.viewer.assets import plotly_js_path

    directory = make_fixture(str(tmp_path / "job" / "profiler"))
    for rank in (0, 1):
        make_fixture(directory, rank=rank)
        report = write_report(directory, rank)
        assert os.path.getsize(report) < 300_000, os.path.getsize(report)
        with open(report, encoding="utf-8") as handle:
            assert '<script src="plotly.min.js"></script>' in handle.read()
    assert os.path.getsize(os.path.join(directory, "plotly.min.js")) == os.path.getsize(plotly_js_path())

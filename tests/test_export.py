"""The exports, read by the tools they are for: msprof-analyze 26.2 and HolisticTraceAnalysis 0.5.

The clients are installed from the package index once into their own venvs under
``~/.cache/msprof-agent-test-clients/`` (they pin their own pandas); where that fails the tests
that need them skip, saying why. msprof-analyze exits 0 even when it fails: every check reads the
files it writes.
"""
import csv
import glob
import html
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess

import pytest

from conftest import PY, ROOT, SCRIPTS, client_python, free_port, hook_env, read_csv, run_script
from msprof_agent.export import ascend_comm

pytestmark = pytest.mark.client
PACKAGES = {"msprof-analyze": "msprof-analyze==26.2.0", "hta": "HolisticTraceAnalysis==0.5.0"}
VENVS = [(name, requirement, "client") for name, requirement in PACKAGES.items()]  # made ahead (conftest)
SLOW_RANK = os.path.join(ROOT, "tests", "scripts", "slow_rank_torch.py")
BUSY_MS, STEPS = 150, 5
MSRUN_JOB, MSRUN_STEPS = os.path.join(SCRIPTS, "msrun_data_parallel.py"), 8


@pytest.fixture(scope="session")
def msprof_analyze():
    python = client_python("msprof-analyze", PACKAGES["msprof-analyze"])

    def run(*args, cwd=None):
        proc = subprocess.run([os.path.join(os.path.dirname(python), "msprof-analyze"), *args], capture_output=True, text=True,
                              timeout=600, cwd=cwd)
        return proc.stdout + proc.stderr
    return run


@pytest.fixture(scope="session")
def hta_python():
    return client_python("hta", PACKAGES["hta"])


def _analyse(path, kinds):
    proc = subprocess.run([PY, "-m", "msprof_agent", "analyse", path, "--export", kinds], env=hook_env(hook=False),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "failed" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture(scope="module")
def torch_job(tmp_path_factory):
    """A real 2-rank torchrun/gloo job under the agent, rank 1 computing BUSY_MS more per step;
    exported afterwards by ``msprof-agent analyse --export text`` (the raw store re-analysed)."""
    pytest.importorskip("torch")
    out = str(tmp_path_factory.mktemp("export") / "prof")
    proc = subprocess.run([PY, "-m", "torch.distributed.run", "--nproc_per_node", "2", SLOW_RANK, "--steps", str(STEPS),
                           "--busy-ms", str(BUSY_MS)], env=hook_env({"start": True, "output_path": out}),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _analyse(out, "text")
    return out


@pytest.fixture(scope="module")
def db_export(torch_job, tmp_path_factory):
    """``copy(target)``: TARGET holding the job re-analysed once with ``--export text,db``, a copy per test, as
    each msprof-analyze run writes its cluster_analysis_output into the tree it reads."""
    tree = str(tmp_path_factory.mktemp("db_export") / "db")
    shutil.copytree(torch_job, tree, ignore=shutil.ignore_patterns("cluster_analysis_output"))
    _analyse(tree, "text,db")

    def copy(target):
        shutil.copytree(tree, target)
        return str(target)
    return copy


def _ascend_dirs(out, suffix="ascend_pt"):
    return {int(re.search(r"profiler_info_(\d+)", p).group(1)): os.path.dirname(p)
            for p in glob.glob(os.path.join(out, f"*_{suffix}", "profiler_info_*.json"))}


def _our_type_counts(out, rank):
    return {r[0]: int(r[1]) for r in read_csv(os.path.join(out, "profiler", f"cpu_op_type_info_{rank}.csv"))[1:]}


def _text_only_copy(out, target):
    """The ascend directories alone: msprof-analyze reads a tree holding any .db as database input."""
    for directory in _ascend_dirs(out).values():
        shutil.copytree(directory, os.path.join(target, os.path.basename(directory)), ignore=shutil.ignore_patterns("*.db"))
    return str(target)


@pytest.mark.torch
def test_text_layout_is_rewritten_in_place_and_counts_as_our_tables(torch_job):
    dirs = _ascend_dirs(torch_job)
    assert sorted(dirs) == [0, 1]
    for rank, directory in dirs.items():
        output = os.path.join(directory, "ASCEND_PROFILER_OUTPUT")
        assert sorted(os.listdir(output)) == ["communication.json", "communication_matrix.json", "op_statistic.csv",
                                              "step_trace_time.csv", "trace_view.json"]  # nothing device-only
        table = list(csv.DictReader(open(os.path.join(output, "step_trace_time.csv"))))
        assert [r["Step"] for r in table] == [str(n) for n in range(1, STEPS + 1)]
        for row in table:  # the parts add up to the step
            parts = float(row["Computing"]) + float(row["Communication(Not Overlapped)"]) + float(row["Free"])
            assert parts == pytest.approx(float(row["Stage"]), abs=0.01)
        counts = {r[1]: int(r[3]) for r in read_csv(os.path.join(output, "op_statistic.csv"))[1:]}
        assert counts == _our_type_counts(torch_job, rank)
        trace = json.load(open(os.path.join(output, "trace_view.json")))
        assert isinstance(trace, list)
        overlap_pid = next(e["pid"] for e in trace if e.get("args", {}).get("name") == "Overlap Analysis")
        assert {e["name"] for e in trace if e["pid"] == overlap_pid and e["ph"] == "X"} >= {"Computing", "Communication(Not Overlapped)"}
        assert sum(1 for e in trace if e.get("cat") == "cpu_op") >= sum(counts.values())  # the timeline also holds ops outside the steps
        comm = json.load(open(os.path.join(output, "communication.json")))
        assert sorted(comm) == [f"step{n}" for n in range(1, STEPS + 1)]
        world = str(ascend_comm.double_hash("world"))  # a group is keyed by msprof-analyze's hash of its name
        assert f"all_reduce__2_0@{world}" in comm["step2"]["collective"] and "Total Op Info" in comm["step2"]["collective"]
        assert json.load(open(os.path.join(directory, "profiler_metadata.json")))["parallel_group_info"] == {
            "world": {"group_name": "world", "group_rank": rank, "global_ranks": [0, 1]}}
    _analyse(torch_job, "text")  # a later export of the same run replaces its directories
    assert _ascend_dirs(torch_job) == dirs
    wrong = subprocess.run([PY, "-m", "msprof_agent", "analyse", torch_job, "--export", "csv"], capture_output=True, text=True)
    assert wrong.returncode == 2 and "export_type: 'csv' is not an export; accepted: text, db" in wrong.stderr


@pytest.mark.torch
def test_cluster_step_table_shows_the_slow_rank(torch_job, msprof_analyze, tmp_path):
    tree = _text_only_copy(torch_job, tmp_path / "text")
    log = msprof_analyze("cluster", "-d", tree)
    path = os.path.join(tree, "cluster_analysis_output", "cluster_step_trace_time.csv")
    assert os.path.exists(path), log[-3000:]
    rows = list(csv.DictReader(open(path)))
    computing = {rank: [float(r["Computing"]) for r in rows if r["Type"] == "rank" and r["Index"] == str(rank)] for rank in (0, 1)}
    assert len(computing[0]) == len(computing[1]) == STEPS
    assert statistics.median(computing[1]) - statistics.median(computing[0]) >= 0.5 * BUSY_MS * 1000  # µs


def _html_text(directory):
    page = open(glob.glob(os.path.join(directory, "mstt_advisor_*.html"))[0]).read()
    page = re.sub(r"<(script|style).*?</\1>", "", page, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


@pytest.mark.torch
def test_advisor_finds_the_slow_rank(torch_job, msprof_analyze, tmp_path):
    tree = _text_only_copy(torch_job, tmp_path / "text")
    report = tmp_path / "advisor"
    log = msprof_analyze("advisor", "all", "-d", tree, "-o", str(report), cwd=str(tmp_path))
    assert glob.glob(os.path.join(report, "mstt_advisor_*.html")), log[-3000:]
    text = _html_text(report)
    assert "slow rank" in text, text[:2000]
    table = text.split("compute(us) communication(us) free(us)", 1)[1]
    rows = re.findall(r"(\d+) ([01]) ([\d.]+) ([\d.]+) ([\d.]+)", table)[:2 * STEPS]
    by_rank = {rank: statistics.median(float(r[2]) for r in rows if r[1] == rank) for rank in ("0", "1")}
    assert by_rank["1"] > by_rank["0"] + 0.5 * BUSY_MS * 1000, rows


@pytest.mark.torch
def test_single_rank_advisor_e2e_is_the_profiled_steps(torch_job, msprof_analyze, tmp_path):
    from msprof_agent.analysis.rundata import load_rank

    directory = _ascend_dirs(torch_job)[0]
    msprof_analyze("advisor", "all", "-d", directory, "-o", str(tmp_path), cwd=str(tmp_path))
    text = _html_text(tmp_path)
    e2e_ms = float(re.search(r"E2E[^\d]*?([\d.]+) ?ms", text).group(1))
    steps = load_rank(os.path.join(torch_job, "profiler"), 0).window_steps
    total_ms = sum(s["end"] - s["start"] for s in steps) / 1e6
    assert abs(e2e_ms - total_ms) <= 0.1 * total_ms, (e2e_ms, total_ms)


@pytest.mark.torch
def test_database_recipe_counts_equal_our_tables(db_export, msprof_analyze, tmp_path):
    tree = db_export(tmp_path / "db")
    for rank, directory in _ascend_dirs(tree).items():  # the database holds what the text files hold
        output = os.path.join(directory, "ASCEND_PROFILER_OUTPUT")
        db = sqlite3.connect(os.path.join(output, f"ascend_pytorch_profiler_{rank}.db"))
        counts = dict(db.execute("SELECT s.value, count(*) FROM COMPUTE_TASK_INFO c JOIN STRING_IDS s ON s.id = c.opType GROUP BY s.value"))
        assert counts == {r[1]: int(r[3]) for r in read_csv(os.path.join(output, "op_statistic.csv"))[1:]}
        assert [r[0] for r in db.execute("SELECT id FROM STEP_TIME ORDER BY id")] == list(range(1, STEPS + 1))
        calls = sum(len([k for k in ops if k != "Total Op Info"])
                    for step in json.load(open(os.path.join(output, "communication.json"))).values() for ops in step.values())
        assert db.execute("SELECT count(*) FROM COMMUNICATION_OP").fetchone()[0] == calls
        steps = sqlite3.connect(os.path.join(output, "analysis.db")).execute("SELECT step, computing FROM StepTraceTime").fetchall()
        # compared as numbers: the NUMERIC column keeps a whole number of us (1013.0) as the integer 1013
        assert [(int(s), float(c)) for s, c in steps] == [(int(r[0]), float(r[1])) for r in read_csv(os.path.join(output, "step_trace_time.csv"))[1:]]
    log = msprof_analyze("cluster", "-d", tree, "-m", "compute_op_sum")
    result = os.path.join(tree, "cluster_analysis_output", "cluster_analysis.db")
    assert os.path.exists(result), log[-3000:]
    rows = sqlite3.connect(result).execute("SELECT Rank, OpType, Count FROM ComputeOpPerRankStatsByOpType").fetchall()
    for rank in (0, 1):
        assert {t: c for r, t, c in rows if r == rank} == _our_type_counts(tree, rank)


RECIPE_QUERIES = """
import json, sqlite3, sys
from msprof_analyze.prof_exports.cluster_time_summary_export import CommunicationTimeExport
from msprof_analyze.prof_exports.slow_link_export import QUERY
db = sqlite3.connect(sys.argv[1])
slow_rank = db.execute(CommunicationTimeExport.QUERY, (0, 2 ** 63 - 1)).fetchall()
print(json.dumps({"slow_rank": slow_rank, "slow_link": db.execute(QUERY).fetchall()}))
"""


@pytest.mark.torch
def test_cluster_fills_the_communication_tables(db_export, msprof_analyze, tmp_path):
    """msprof-analyze's cluster run on the text+db export logs no error and fills its communication group map
    (the default group by its name and both ranks), its per-rank communication time and bandwidth and the
    matrix of links between the ranks, from the calls each rank recorded; the queries of its slow-rank and
    slow-link recipes find every call (with 2 ranks neither can name an outlier: their own limits)."""
    from msprof_agent.analysis.rundata import load_rank

    tree = db_export(tmp_path / "db")
    log = msprof_analyze("cluster", "-d", tree)
    assert "ERROR" not in log, log[-3000:]
    db = sqlite3.connect(os.path.join(tree, "cluster_analysis_output", "cluster_analysis.db"))
    world = str(ascend_comm.double_hash("world"))
    assert db.execute("SELECT type, rank_set, group_name, group_id FROM CommunicationGroupMapping").fetchall() == [
        ("collective", "(0,1)", world, "world")]
    calls = {rank: load_rank(os.path.join(tree, "profiler"), rank).comm for rank in (0, 1)}
    assert all(len(c) == 4 * STEPS for c in calls.values())  # one all_reduce per parameter a step
    for rank, recorded in calls.items():
        rows = db.execute("SELECT step, elapsed_time FROM ClusterCommunicationTime WHERE rank_id = ? AND hccl_op_name != 'Total Op Info' "
                          "AND group_name = ?", (rank, world)).fetchall()
        assert len(rows) == len(recorded)
        assert sum(ms for _, ms in rows) == pytest.approx(sum(c["dur"] for c in recorded) / 1e6, rel=1e-4)
        totals = dict(db.execute("SELECT step, elapsed_time FROM ClusterCommunicationTime WHERE rank_id = ? AND hccl_op_name = 'Total Op Info'",
                                 (rank,)).fetchall())
        assert sorted(totals) == [f"step{n}" for n in range(1, STEPS + 1)]
        sizes = dict(db.execute("SELECT step, transit_size FROM ClusterCommunicationBandwidth WHERE rank_id = ? AND hccl_op_name = 'Total Op Info'",
                                (rank,)).fetchall())
        assert sizes["step2"] == pytest.approx(sum(c["bytes"] for c in recorded if c["step"] == 2) / (1 << 20), rel=1e-6)
    links = db.execute("SELECT src_rank, dst_rank, transit_size, transit_time, bandwidth, transport_type FROM ClusterCommunicationMatrix "
                       "WHERE step = 'step2' AND hccl_op_name = 'Total Op Info'").fetchall()
    assert sorted((int(s), int(d)) for s, d, *_ in links) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for src, dst, size, ms, bandwidth, transport in links:  # the link from a rank: its calls of step 2, their payload and time
        own = [c for c in calls[int(src)] if c["step"] == 2]
        assert size == pytest.approx(sum(c["bytes"] for c in own) / (1 << 20), rel=1e-6)
        assert ms == pytest.approx(sum(c["dur"] for c in own) / 1e6, rel=1e-4) and bandwidth == pytest.approx(size / ms)
        assert transport == ("LOCAL" if src == dst else "TCP")
    python = client_python("msprof-analyze", PACKAGES["msprof-analyze"])
    for rank, directory in _ascend_dirs(tree).items():
        path = os.path.join(directory, "ASCEND_PROFILER_OUTPUT", f"ascend_pytorch_profiler_{rank}.db")
        proc = subprocess.run([python, "-c", RECIPE_QUERIES, path], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        found = json.loads(proc.stdout)
        assert {(r[0], r[1]) for r in found["slow_rank"]} == {(rank, world)} and len(found["slow_rank"]) == len(calls[rank])
        assert sorted(r[5] for r in found["slow_link"]) == sorted(c["bytes"] for c in calls[rank])  # dataSize: the payload's bytes
        assert {r[4] for r in found["slow_link"]} == {"FP32"}


@pytest.mark.mindspore
def test_cluster_fills_the_communication_tables_of_a_mindspore_msrun_job(msprof_analyze, tmp_path):
    """A 2-rank data-parallel ``Model.train`` launched by msrun on CPU (MSCCL), exported text+db:
    msprof-analyze's cluster run logs no error, maps the default group to both ranks and fills its
    communication time per call (the AllReduce the compiled step runs) and the links between the ranks."""
    from msprof_agent.analysis.rundata import load_rank

    out, logs = tmp_path / "prof", tmp_path / "msrun_logs"
    msrun = os.path.join(os.path.dirname(PY), "msrun")
    proc = subprocess.run([PY, msrun, "--worker_num", "2", "--local_worker_num", "2", "--master_port", str(free_port()), "--log_dir",
                           str(logs), "--join", "True", MSRUN_JOB, "--steps", str(MSRUN_STEPS)],
                          env=hook_env({"start": True, "output_path": str(out)}), capture_output=True, text=True, timeout=300)
    worker_logs = "".join(open(p, errors="replace").read()[-1500:] for p in sorted(glob.glob(str(logs / "*.log"))))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:] + worker_logs
    assert sorted(glob.glob(str(out / "*_ascend_ms"))) == [], os.listdir(out)  # msrun and its scheduler profile nothing
    _analyse(str(out), "text,db")
    log = msprof_analyze("cluster", "-d", str(out))
    assert "ERROR" not in log, log[-3000:]
    db = sqlite3.connect(os.path.join(out, "cluster_analysis_output", "cluster_analysis.db"))
    world = str(ascend_comm.double_hash("world"))
    assert db.execute("SELECT type, rank_set, group_name, group_id FROM CommunicationGroupMapping").fetchall() == [
        ("collective", "(0,1)", world, "world")]
    for rank in (0, 1):
        recorded = load_rank(str(out / "profiler"), rank).comm
        assert {c["name"] for c in recorded} == {"AllReduce"} and {c["step"] for c in recorded} == set(range(1, MSRUN_STEPS + 1))
        rows = db.execute("SELECT elapsed_time FROM ClusterCommunicationTime WHERE rank_id = ? AND hccl_op_name != 'Total Op Info' "
                          "AND group_name = ?", (rank, world)).fetchall()
        assert len(rows) == len(recorded)
        assert sum(ms for (ms,) in rows) == pytest.approx(sum(c["dur"] for c in recorded) / 1e6, rel=1e-4)
    # its matrix from a MindSpore database is the whole window's (CommAnalyzerMatrix has no step): one "step"
    links = db.execute("SELECT step, src_rank, dst_rank FROM ClusterCommunicationMatrix WHERE hccl_op_name = 'Total Op Info'")
    assert sorted((step, int(s), int(d)) for step, s, d in links) == [("step", 0, 0), ("step", 0, 1), ("step", 1, 0), ("step", 1, 1)]


HTA_CHECK = """
import json, sys
from hta.trace_analysis import TraceAnalysis
from hta.trace_diff import LabeledTrace, TraceDiff
analysis = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
diff = TraceDiff.compare_traces(LabeledTrace("a", trace_dir=sys.argv[1]), LabeledTrace("b", trace_dir=sys.argv[1]))
print(json.dumps({"steps": [int(s) for s in analysis.get_profiler_steps()], "ranks": sorted(int(r) for r in analysis.t.traces),
                  "diff_ops": int(len(diff)), "unchanged": bool((diff["diff_counts"] == 0).all())}))
"""


@pytest.mark.torch
def test_hta_loads_every_rank_and_step(torch_job, hta_python):
    directory = os.path.join(torch_job, "hta_trace")
    assert all(name.endswith(".pt.trace.json") for name in os.listdir(directory))
    proc = subprocess.run([hta_python, "-c", HTA_CHECK, directory], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ranks"] == [0, 1]
    assert result["steps"] == list(range(1, STEPS + 1))  # HTA drops the last step unless include_last_profiler_step
    assert result["diff_ops"] > 0 and result["unchanged"]


HTA_DIFF = """
import json, sys
from hta.trace_diff import LabeledTrace, TraceDiff
diff = TraceDiff.compare_traces(LabeledTrace("plain", trace_dir=sys.argv[1]), LabeledTrace("busier", trace_dir=sys.argv[2]),
                                control_rank=0, test_rank=0, control_iteration=2, test_iteration=2)
print(json.dumps(diff.reset_index().fillna(0).to_dict("records"), default=str))
"""


@pytest.mark.torch
def test_hta_trace_diff_shows_the_extra_work_of_another_run(torch_job, hta_python, tmp_path):
    """TraceDiff between two runs: the job's rank 0 (no extra work) and a one-rank run of the same script
    whose rank 0 also runs the busy loop's matmul + tanh every step: tanh appears, only in the second."""
    out = str(tmp_path / "busier")
    proc = subprocess.run([PY, "-m", "torch.distributed.run", "--nproc_per_node", "1", SLOW_RANK, "--steps", str(STEPS),
                           "--busy-rank", "0", "--busy-ms", "60"], env=hook_env({"start": True, "output_path": out, "export_type": ["text"]}),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = subprocess.run([hta_python, "-c", HTA_DIFF, os.path.join(torch_job, "hta_trace"), os.path.join(out, "hta_trace")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["name"]: r for r in json.loads(proc.stdout.strip().splitlines()[-1])}
    tanh, mm = rows["aten::tanh"], rows["aten::mm"]  # count columns are named by the traces' labels
    assert tanh["plain_counts"] == 0 and tanh["busier_counts"] > 0 and tanh["counts_change_categories"] == "+", tanh
    assert mm["diff_counts"] == tanh["busier_counts"] and mm["counts_change_categories"] == "+", mm  # one matmul per tanh
    assert tanh["diff_duration"] + mm["diff_duration"] > 0.3 * 60_000, (tanh, mm)  # the busy loop's 60 ms, mostly these (µs)
    assert rows["aten::mse_loss"]["diff_counts"] == 0  # the training step itself is the same in both runs


@pytest.mark.mindspore
def test_mindspore_run_is_found_as_ascend_ms(lenet_job, msprof_analyze, tmp_path):
    out = str(tmp_path / "prof")
    shutil.copytree(lenet_job, out)
    _analyse(out, "text")
    dirs = _ascend_dirs(out, "ascend_ms")
    assert list(dirs) == [0]
    log = msprof_analyze("cluster", "-d", out)
    path = os.path.join(out, "cluster_analysis_output", "cluster_step_trace_time.csv")
    assert os.path.exists(path), log[-3000:]
    rows = list(csv.DictReader(open(path)))
    assert [r["Step"] for r in rows] == [str(n) for n in range(1, 13)] and all(float(r["Computing"]) > 0 for r in rows)


@pytest.mark.torch
def test_variable_export_type_writes_both_at_exit(tmp_path):
    """Needs no client: the exit analysis writes both exports when the variable names them, and a run
    that does not name them gets neither."""
    plain = str(tmp_path / "plain")
    proc = run_script([os.path.join(ROOT, "tests", "scripts", "tiny_torch.py"), "--steps", "2"], {"start": True, "output_path": plain}, timeout=300)
    assert proc.returncode == 0 and sorted(os.listdir(plain)) == ["profiler"], (os.listdir(plain), proc.stderr[-3000:])
    out = str(tmp_path / "prof")
    proc = run_script([os.path.join(ROOT, "tests", "scripts", "tiny_torch.py"), "--steps", "4"],
                      {"start": True, "output_path": out, "export_type": ["text", "db"]}, timeout=300)
    assert proc.returncode == 0 and "failed" not in proc.stderr, proc.stderr[-3000:]
    (directory,) = _ascend_dirs(out).values()
    output = os.path.join(directory, "ASCEND_PROFILER_OUTPUT")
    counts = {r[1]: int(r[3]) for r in read_csv(os.path.join(output, "op_statistic.csv"))[1:]}
    tasks = sqlite3.connect(os.path.join(output, "ascend_pytorch_profiler_0.db")).execute("SELECT count(*) FROM TASK").fetchone()[0]
    assert tasks == sum(counts.values()) > 0
    assert len(os.listdir(os.path.join(out, "hta_trace"))) == 1

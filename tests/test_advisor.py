"""The advisor's scenarios: real MindSpore and PyTorch trainings, each with one injected cause of known
size (tests/scripts/advisor_*.py), must give that cause as their top finding, with the right category,
steps and value (within 15 % of the injected amount); clean runs give no data, host, jitter or
CPU-contention finding. Each job runs once per module (``scenario``), however many tests read it.
"""
import os
import subprocess

import pytest

from conftest import EXAMPLES, PY, SCRIPTS, TINY, hook_env, injected_line, profile_into, read_csv, read_json, run_script
from msprof_agent import compare
from msprof_agent.analysis import advisor

TORCH = os.path.join(SCRIPTS, "advisor_torch.py")
MINDSPORE = os.path.join(SCRIPTS, "advisor_mindspore.py")
TOLERANCE = 0.15
FALSE_ALARMS = {"data_wait", "host_work", "periodic_pause", "cpu_contention"}

SCENARIOS = {  # name: (script, arguments, extra options)
    "torch_clean": (TORCH, [], {}),
    "torch_data": (TORCH, ["--data-ms", "60"], {}),
    "torch_loop": (TORCH, ["--loop-ms", "60"], {"with_stack": True}),
    "torch_forward": (TORCH, ["--forward-ms", "50", "--closure"], {"with_stack": True}),
    "torch_op": (TORCH, ["--big-op", "600"], {}),
    "torch_pause": (TORCH, ["--pause-every", "4", "--pause-ms", "100", "--steps", "24"], {}),
    "torch_memory": (TORCH, ["--grow-mb", "4", "--steps", "40"], {"cpu_sampling_interval": 10}),  # ~2 ms steps: RSS sampled often enough
    "ms_clean": (MINDSPORE, [], {}),
    "ms_data": (MINDSPORE, ["--data-ms", "60"], {}),
    "ms_loop": (MINDSPORE, ["--loop-ms", "60"], {"with_stack": True}),
    "ms_pause": (MINDSPORE, ["--pause-every", "4", "--pause-ms", "100", "--steps", "20"], {}),
}


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    """``scenario(name)``: the profiler directory and summary of that job, run on first use."""
    done = {}

    def run(name):
        if name not in done:
            script, arguments, options = SCENARIOS[name]
            out = str(tmp_path_factory.mktemp(name))
            proc = run_script([script] + arguments, profile_into(out, **options), timeout=300)
            assert proc.returncode == 0, proc.stderr[-3000:]
            profiler_dir = os.path.join(out, "profiler")
            done[name] = profiler_dir, read_json(os.path.join(profiler_dir, "summary_0.json")), proc.stderr
        return done[name]
    return run


def top(summary, category, finding_id):
    """The top finding, checked for category and id; warm-up steps are never another finding's evidence."""
    findings = summary["findings"]
    assert findings, summary["step_breakdown_ms"]
    first = findings[0]
    assert (first["category"], first["id"]) == (category, finding_id), [(f["id"], f["ms_per_step"]) for f in findings]
    assert summary["verdict"] == advisor.VERDICT_OF[category]
    warm = {w["step"] for w in summary["warmup_steps"]}
    for finding in findings:
        if finding["id"] != "warm_up":
            steps = finding["evidence"].get("steps") or []
            flat = {n for item in steps for n in (range(item[0], item[1] + 1) if isinstance(item, list) else [item])}
            assert not flat & warm, (finding["id"], flat & warm)
    return first


def near(value, expected):
    assert abs(value - expected) <= TOLERANCE * expected, (value, expected)


def clean(summary):
    found = {f["id"] for f in summary["findings"]}
    assert not found & FALSE_ALARMS, summary["findings"]


@pytest.mark.torch
def test_torch_clean_run_raises_no_false_alarm(scenario):
    _, summary, stderr = scenario("torch_clean")
    clean(summary)
    assert summary["verdict"] in ("balanced", "compute-bound")


@pytest.mark.torch
def test_torch_slow_data_source_is_data_bound(scenario):
    profiler_dir, summary, stderr = scenario("torch_data")
    finding = top(summary, "data", "data_wait")
    near(finding["ms_per_step"], 60.0)
    assert "num_workers" in finding["action"]
    assert "ms/step at stake: Data-bound" in stderr  # the exit table
    with open(os.path.join(profiler_dir, "report_0.html")) as handle:
        report = handle.read()
    assert report.index('class="finding severity-high" data-id="data_wait"') < report.index('class="verdict"')  # findings first


@pytest.mark.torch
@pytest.mark.parametrize("name, injected, function", [("torch_loop", 60.0, "host_work_in_loop"),
                                                      ("torch_forward", 50.0, "python_in_forward")])
def test_torch_host_work_is_host_bound_and_names_the_function(scenario, name, injected, function):
    """Python work in the loop, or inside the forward run in an optimizer closure (Lightning's way):
    host time, not compute; the top hot spot is the injected function."""
    profiler_dir, summary, _ = scenario(name)
    baseline = scenario("torch_clean")[1]["step_breakdown_ms"]["host"]
    finding = top(summary, "host", "host_work")
    near(finding["ms_per_step"] - baseline, injected)
    spot = f"{function} (injected_causes.py:{injected_line(function)})"  # the time.sleep line
    assert finding["evidence"]["hot_spots"][0]["function"] == spot
    assert summary["python_hot_spots"][0]["function"] == spot
    assert read_csv(os.path.join(profiler_dir, "python_hot_spots_0.csv"))[1][2] == spot
    op_types = [row[0] for row in read_csv(os.path.join(profiler_dir, "cpu_op_type_info_0.csv"))[1:]]
    assert all("::" in t for t in op_types), op_types  # ranges and Python calls are not ops
    if name == "torch_forward":
        assert "Optimizer.step#SGD.step" in [a["name"] for a in summary["annotations"]]


@pytest.mark.torch
def test_torch_dominant_op_is_compute_bound_with_its_share(scenario):
    profiler_dir, summary, _ = scenario("torch_op")
    finding = top(summary, "compute", "hot_ops")
    hot = finding["evidence"]["hot_ops"][0]
    assert hot["op_type"] == "aten::mm"
    measured = {row[0]: float(row[5]) for row in read_csv(os.path.join(profiler_dir, "cpu_op_type_info_0.csv"))[1:]}
    near(hot["percent"], measured["aten::mm"])
    assert hot["percent"] > 0.5


@pytest.mark.parametrize("name", [pytest.param("torch_pause", marks=pytest.mark.torch), pytest.param("ms_pause", marks=pytest.mark.mindspore)])
def test_periodic_pause_is_jitter_with_its_period(scenario, name):
    _, summary, _ = scenario(name)
    finding = top(summary, "jitter", "periodic_pause")
    evidence = finding["evidence"]
    assert evidence["period"] == 4
    assert len({n % 4 for n in evidence["steps"]}) == 1 and len(evidence["steps"]) >= 4  # after step 4k: in it or the next
    near(evidence["excess_ms"], 100.0)
    steady = summary["steady_steps"]
    near(finding["ms_per_step"], 100.0 * len(evidence["steps"]) / steady)


@pytest.mark.torch
def test_torch_memory_kept_every_step_is_memory_growth(scenario):
    _, summary, _ = scenario("torch_memory")
    finding = top(summary, "memory", "memory_growth")
    near(finding["evidence"]["bytes_per_step"], 4 << 20)


@pytest.mark.mindspore
def test_mindspore_clean_run_raises_no_false_alarm(scenario):
    clean(scenario("ms_clean")[1])


@pytest.mark.mindspore
def test_mindspore_slow_data_source_is_data_bound(scenario):
    finding = top(scenario("ms_data")[1], "data", "data_wait")
    near(finding["ms_per_step"], 60.0)
    assert "num_parallel_workers" in finding["action"]


@pytest.mark.mindspore
def test_mindspore_host_work_is_host_bound_and_names_the_function(scenario):
    summary = scenario("ms_loop")[1]
    baseline = scenario("ms_clean")[1]["step_breakdown_ms"]["host"]
    finding = top(summary, "host", "host_work")
    near(finding["ms_per_step"] - baseline, 60.0)
    assert finding["evidence"]["hot_spots"][0]["function"] == f"host_work_in_loop (injected_causes.py:{injected_line('host_work_in_loop')})"


@pytest.mark.torch
def test_compare_says_which_findings_appeared_and_vanished(scenario):
    clean_dir, data_dir = scenario("torch_clean")[0], scenario("torch_data")[0]
    result = compare.compare(os.path.dirname(clean_dir), os.path.dirname(data_dir))
    assert "data_wait" in [f["id"] for f in result["findings"]["appeared"]]
    assert "finding appeared: Data-bound" in compare.to_text(result)
    back = compare.compare(os.path.dirname(data_dir), os.path.dirname(clean_dir))
    assert "data_wait" in [f["id"] for f in back["findings"]["vanished"]]


def _rows(totals_ms):
    return [{"n": n, "start": n * 10**9, "end": n * 10**9 + int(t * 1e6), "total": int(t * 1e6), "wait": 0}
            for n, t in enumerate(totals_ms, 1)]


@pytest.mark.unit
def test_warm_up_is_never_the_verdict_and_no_finding_means_balanced():
    warm = {"id": "warm_up", "category": "warm-up"}
    assert advisor.verdict([warm, {"id": "host_work", "category": "host"}]) == "host-bound"
    assert advisor.verdict([warm]) == advisor.verdict([]) == "balanced"
    assert set(advisor.VERDICT_OF) == set(advisor.CATEGORIES) - {"warm-up"}


@pytest.mark.unit
def test_jitter_needs_a_period():
    periodic = [10.0 + (60.0 if n % 5 == 0 else 0.0) for n in range(1, 25)]
    finding = advisor.jitter_finding([dict(r, total=r["total"] / 1e6, host=0.0) for r in _rows(periodic)])
    assert finding["evidence"]["period"] == 5 and finding["evidence"]["steps"] == [5, 10, 15, 20]
    assert finding["evidence"]["excess_ms"] == 60.0
    scattered = [10.0 + (60.0 if n in (3, 4, 11, 19) else 0.0) for n in range(1, 25)]
    assert advisor.jitter_finding([dict(r, total=r["total"] / 1e6, host=0.0) for r in _rows(scattered)]) is None
    alternate = [10.0 + (100.0 if n % 4 == 1 else 30.0 if n % 4 == 3 else 0.0) for n in range(2, 22)]  # load on the odd steps between
    finding = advisor.jitter_finding([dict(r, total=r["total"] / 1e6, host=0.0) for r in _rows(alternate)])
    assert finding["evidence"]["period"] == 4 and finding["evidence"]["steps"] == [4, 8, 12, 16, 20]  # the pause explains most excess
    small = [10.0 + (15.0 if n % 5 == 0 else 0.0) for n in range(1, 25)]  # under 20 ms: noise on a shared machine
    assert advisor.jitter_finding([dict(r, total=r["total"] / 1e6, host=0.0) for r in _rows(small)]) is None


@pytest.mark.unit
def test_hot_spots_keep_the_line_and_fold_a_functions_lines():
    """py-spy's rows: "function (file:line)" at the line sampled; a function sampled at two lines also as one row."""
    from types import SimpleNamespace

    ms = 1_000_000
    stacks = [(0, ["<module> (job.py:12)", "step (job.py:5)"]), (30, ["<module> (job.py:12)", "step (job.py:6)"]),
              (40, ["<module> (job.py:14)"]), (100, [])]
    data = SimpleNamespace(stacks=[{"ts": t * ms, "frames": f} for t, f in stacks], window_steps=[{"n": 1, "start": 0}])
    spots = {s["function"]: s for s in advisor.hot_spots(data, [{"n": 1, "start": 0, "end": 100 * ms}])}
    assert list(spots) == ["<module> (job.py:14)", "step (job.py:5)", "step (job.py:6)", "step (job.py)"]  # the lines, then the folds
    assert [spots["<module> (job.py:14)"][k] for k in ("self_ms", "total_ms")] == [60.0, 60.0]
    assert [spots["step (job.py)"][k] for k in ("self_ms", "total_ms", "lines")] == [40.0, 40.0, 2]
    assert spots["step (job.py:5)"]["self_ms"] == 30.0 and "lines" not in spots["step (job.py:5)"]
    assert "<module> (job.py)" not in spots  # sampled innermost at one line only: the line's row is the function's


@pytest.mark.torch
def test_a_module_level_loop_is_a_hot_spot_with_its_line(tmp_path):
    """Time in the script's own top-level loop is "<module> (tiny_torch.py:N)", N the line of its sleep."""
    out = str(tmp_path / "prof")
    proc = run_script([TINY, "--steps", "8", "--sleep-ms", "60"], profile_into(out, with_stack=True), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(TINY) as handle:
        line = next(n for n, text in enumerate(handle, 1) if "time.sleep(pause / 1000)" in text)
    spot = read_json(os.path.join(out, "profiler", "summary_0.json"))["python_hot_spots"][0]
    assert spot["function"] == f"<module> (tiny_torch.py:{line})" and spot["self_ms_per_step"] > 40, spot


@pytest.mark.torch
def test_slowed_rank_of_a_two_rank_gloo_job_is_the_straggler(tmp_path):
    """Rank 1 sleeps 200 ms a step before its all_reduce; rank 0 waits for it inside the collective."""
    out = str(tmp_path / "prof")
    proc = subprocess.run([PY, "-m", "torch.distributed.run", "--nproc_per_node", "2", os.path.join(EXAMPLES, "torch_cnn.py"),
                           "--steps", "6", "--sleep-rank", "1", "--sleep-ms", "200"],
                          env=hook_env(profile_into(out)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cluster = read_json(os.path.join(out, "profiler", "cluster_summary.json"))
    finding = cluster["findings"][0]
    assert (finding["id"], finding["category"], finding["evidence"]["rank"]) == ("straggler", "straggler", 1)
    near(finding["ms_per_step"], 200.0)
